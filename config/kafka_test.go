package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestEventsKafka parses a full events.kafka block: the password comes
// from the variable password_env names, and the admin view shows its name,
// never its value.
func TestEventsKafka(t *testing.T) {
	t.Setenv("FG_TEST_KAFKA_PASSWORD", "hunter2")
	c := mustParse(t, `
events:
  sink: kafka
  spool_dir: /var/spool/fg
  kafka:
    brokers: ["10.0.0.1:9092", "kafka-2.internal:9093"]
    topic: gw.audit
    client_id: gw-eu-1
    acks: leader
    compression: zstd
    sasl: {mechanism: scram-sha-512, username: gw, password_env: FG_TEST_KAFKA_PASSWORD}
`+okRoute)
	k := c.Events.Kafka
	want := EventsKafka{
		Brokers: []string{"10.0.0.1:9092", "kafka-2.internal:9093"}, Topic: "gw.audit", ClientID: "gw-eu-1",
		Acks: "leader", Compression: "zstd",
		SASL: &EventsKafkaSASL{Mechanism: "scram-sha-512", Username: "gw", PasswordEnv: "FG_TEST_KAFKA_PASSWORD", Password: "hunter2"},
	}
	if c.Events.Sink != SinkKafka || !reflect.DeepEqual(k, want) {
		t.Errorf("events.kafka = %+v, want %+v", k, want)
	}
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, "hunter2") || !strings.Contains(s, `"password_env":"FG_TEST_KAFKA_PASSWORD"`) {
		t.Errorf("the admin view shows the password or hides its variable: %s", s)
	}
}

// A password written in the file is refused: it goes in the environment.
func TestEventsKafkaPasswordInFile(t *testing.T) {
	errs := parseErrors(t, `
events:
  kafka:
    sasl: {mechanism: plain, username: gw, password: hunter2}
`+okRoute)
	if s := errs.Error(); !strings.Contains(s, `unknown key "password"`) || strings.Contains(s, "hunter2") {
		t.Errorf("errors = %v", s)
	}
}
