package events

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// The sink's TLS and SASL settings, against a kfake cluster that asks for
// them: the settings config builds from events.kafka.tls and
// events.kafka.sasl connect, and wrong ones leave the sink down, with the
// reason in Ready and the events in the spool, until a recorder with the
// right ones takes the spool over.

// kafkaClientOpts are the connection options of the sink c, for a test's
// consumer to connect as the sink does.
func kafkaClientOpts(t testing.TB, c KafkaSink) []kgo.Opt {
	t.Helper()
	s, err := newKafkaSink(c)
	if err != nil {
		t.Fatal(err)
	}
	return s.opts
}

// kafkaRefusedThenFixed records events with the sink bad, which the
// cluster k refuses: Ready reports the sink down with a reason containing
// why, and every event waits in the spool. A recorder on the same spool
// with the sink good then delivers them all, in order.
func kafkaRefusedThenFixed(t *testing.T, k *kfake.Cluster, bad, good Sink, why string) {
	t.Helper()
	r := newTestRecorder(t, bad, Options{})
	want := recordAll(t, r, 0, 20)
	var ready error
	waitFor(t, "Ready to report the sink down", func() bool { ready = r.Ready(); return ready != nil })
	t.Logf("Ready() = %v", ready)
	if !strings.Contains(ready.Error(), why) {
		t.Errorf("Ready() = %v, want the reason, %q", ready, why)
	}
	if got := r.spooledGauge(); got != 20 {
		t.Errorf("gateway_events_spooled = %v, want 20", got)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := kafkaRecords(t, k.ListenAddrs(), kafkaClientOpts(t, good.Kafka)...); len(got) != 0 {
		t.Fatalf("%d records in the topic from a refused sink", len(got))
	}

	r = newTestRecorder(t, good, Options{})
	want = append(want, recordAll(t, r, 20, 40)...)
	var got []kafkaStored
	waitFor(t, "every event in the topic", func() bool {
		got = kafkaRecords(t, k.ListenAddrs(), kafkaClientOpts(t, good.Kafka)...)
		return holdsAll(got, want)
	})
	dups := checkKafka(t, got, want)
	t.Logf("%d acknowledged, %d duplicates in the topic", len(want), dups)
	waitFor(t, "Ready once the sink connects", func() bool { return r.Ready() == nil })
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
}

// kafkaTLS is a cluster that speaks TLS only, with a server certificate
// for localhost and 127.0.0.1 signed by a new CA, and that requires a
// client certificate signed by the same CA; and the sink's TLS settings
// that connect to it, as config builds them from tls {ca, cert, key,
// server_name}.
func kafkaTLS(t *testing.T) (*kfake.Cluster, *testcerts.CA, *tls.Config) {
	ca := testcerts.NewCA(t, "kafka test CA")
	k := startKafka(t, kfake.TLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Server(t, "kafka").TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}))
	return k, ca, &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      ca.Pool(),
		ServerName:   "localhost",
		Certificates: []tls.Certificate{ca.Client(t, "floodgate").TLS(t)},
	}
}

// TestKafkaTLS delivers over TLS, with a client certificate, and checks
// that a TLS connection is all the brokers take.
func TestKafkaTLS(t *testing.T) {
	t.Parallel()
	k, _, good := kafkaTLS(t)
	c := kafkaCase(t, k.ListenAddrs())
	c.Kafka.TLS = good
	r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
	want := recordAll(t, r, 0, 30)
	var got []kafkaStored
	waitFor(t, "every event in the topic", func() bool {
		got = kafkaRecords(t, k.ListenAddrs(), kafkaClientOpts(t, c.Kafka)...)
		return holdsAll(got, want)
	})
	if dups := checkKafka(t, got, want); dups != 0 || len(got) != len(want) {
		t.Fatalf("%d records with %d duplicates, want %d and none", len(got), dups, len(want))
	}
	waitFor(t, "the delivered counts", func() bool {
		return r.total(TypeBreakerRejected, resultDelivered)+r.total(TypeRateLimited, resultDelivered) == 30
	})
	if err := r.Ready(); err != nil {
		t.Errorf("Ready() = %v over TLS", err)
	}

	// Without tls, the sink talks plaintext to a TLS listener: refused.
	plain := kafkaCase(t, k.ListenAddrs())
	p := newTestRecorder(t, plain, Options{})
	recordAll(t, p, 0, 5)
	waitFor(t, "Ready to report a plaintext sink down", func() bool { return p.Ready() != nil })
	t.Logf("plaintext to TLS: Ready() = %v", p.Ready())
}

// TestKafkaTLSRefused connects with TLS settings the cluster or the sink
// refuses: the events wait in the spool, Ready says why, and a recorder
// with the right settings delivers every one.
func TestKafkaTLSRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(c *tls.Config, t *testing.T)
		why  string
	}{
		{"wrong CA", func(c *tls.Config, t *testing.T) {
			c.RootCAs = testcerts.NewCA(t, "another CA").Pool()
		}, "certificate signed by unknown authority"},
		{"wrong server name", func(c *tls.Config, _ *testing.T) {
			c.ServerName = "kafka.example.com"
		}, "kafka.example.com"},
		{"no client certificate", func(c *tls.Config, _ *testing.T) {
			c.Certificates = nil
		}, "certificate required"},
		// crypto/tls sends no certificate that the server's list of
		// acceptable CAs rules out, so the broker sees none.
		{"client certificate of another CA", func(c *tls.Config, t *testing.T) {
			c.Certificates = []tls.Certificate{testcerts.NewCA(t, "another CA").Client(t, "floodgate").TLS(t)}
		}, "certificate required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, _, goodTLS := kafkaTLS(t)
			good := kafkaCase(t, k.ListenAddrs())
			good.Kafka.TLS = goodTLS
			bad := good
			bad.Kafka.TLS = goodTLS.Clone()
			tc.edit(bad.Kafka.TLS, t)
			kafkaRefusedThenFixed(t, k, bad, good, tc.why)
		})
	}
}

// kafkaMechanisms are the sink's SASL mechanisms with the names kfake
// gives them.
var kafkaMechanisms = []struct{ sink, kfake string }{
	{"plain", "PLAIN"},
	{"scram-sha-256", "SCRAM-SHA-256"},
	{"scram-sha-512", "SCRAM-SHA-512"},
}

// TestKafkaSASL delivers with each mechanism, to a cluster that knows the
// sink's user by that mechanism only.
func TestKafkaSASL(t *testing.T) {
	t.Parallel()
	for _, m := range kafkaMechanisms {
		t.Run(m.sink, func(t *testing.T) {
			t.Parallel()
			k := startKafka(t, kfake.EnableSASL(), kfake.Superuser(m.kfake, "gateway", "s3cret"))
			c := kafkaCase(t, k.ListenAddrs())
			c.Kafka.SASL = &KafkaSASL{Mechanism: m.sink, Username: "gateway", Password: "s3cret"}
			r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
			want := recordAll(t, r, 0, 30)
			var got []kafkaStored
			waitFor(t, "every event in the topic", func() bool {
				got = kafkaRecords(t, k.ListenAddrs(), kafkaClientOpts(t, c.Kafka)...)
				return holdsAll(got, want)
			})
			if dups := checkKafka(t, got, want); dups != 0 || len(got) != len(want) {
				t.Fatalf("%d records with %d duplicates, want %d and none", len(got), dups, len(want))
			}
			if err := r.Ready(); err != nil {
				t.Errorf("Ready() = %v with the right password", err)
			}
		})
	}
}

// TestKafkaSASLRefused authenticates with a wrong password, and with no
// SASL at all, for each mechanism: the events wait in the spool, Ready
// says why, and a recorder with the right password delivers every one.
func TestKafkaSASLRefused(t *testing.T) {
	t.Parallel()
	for _, m := range kafkaMechanisms {
		for _, wrong := range []struct {
			name string
			sasl *KafkaSASL
			why  string
		}{
			// kfake closes the connection on a failed
			// authentication, where a broker answers
			// SASL_AUTHENTICATION_FAILED first: the sink says
			// what such an EOF most likely means.
			{"wrong password", &KafkaSASL{Mechanism: m.sink, Username: "gateway", Password: "guess"}, "SASL " + m.sink + " as gateway: a wrong username or password?"},
			{"unknown user", &KafkaSASL{Mechanism: m.sink, Username: "nobody", Password: "s3cret"}, "SASL " + m.sink + " as nobody: a wrong username or password?"},
			{"no sasl", nil, "SASL is required"},
		} {
			t.Run(m.sink+"/"+wrong.name, func(t *testing.T) {
				t.Parallel()
				k := startKafka(t, kfake.EnableSASL(), kfake.Superuser(m.kfake, "gateway", "s3cret"))
				good := kafkaCase(t, k.ListenAddrs())
				good.Kafka.SASL = &KafkaSASL{Mechanism: m.sink, Username: "gateway", Password: "s3cret"}
				bad := good
				bad.Kafka.SASL = wrong.sasl
				kafkaRefusedThenFixed(t, k, bad, good, wrong.why)
			})
		}
	}
}
