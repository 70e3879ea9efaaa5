// Command kafka is the Kafka side of bench/audit.sh: a cluster to record
// to, a count of what it holds, and a recorder driven at a fixed rate.
//
//	go run ./bench/kafka serve -ports P1,P2,P3 [-topics T1,T2] [-partitions N]
//	go run ./bench/kafka count -brokers ADDRS [-topic T]
//	go run ./bench/kafka record -brokers ADDRS [-topic T] -rate 50000 -duration 30s -spool DIR
//
// serve runs franz-go's kfake, a Kafka cluster that speaks the real
// protocol (in memory), with one broker per port, until it is stopped.
// count reads the whole topic and prints "records N ids M": the records,
// and the distinct event ids among them (the header id; a duplicate is a
// redelivery). record hands events like a gateway's audit events to an
// events.Recorder with the Kafka sink and a spool, at -rate a second (in
// ticks of a millisecond) for -duration, waits for the spool to drain,
// and prints one line of key=value pairs: what was offered, recorded,
// delivered, dropped and failed (gateway_events_total), the rate offered
// and the rate delivered, how long the drain took, and the CPU the process
// used per event.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floodgate-gw/floodgate/events"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serve(args)
	case "count":
		err = count(args)
	case "record":
		err = record(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kafka serve|count|record [flags]")
	os.Exit(2)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	ports := fs.String("ports", "", "one broker per port, comma-separated (required)")
	topics := fs.String("topics", "floodgate-events", "the topics to create, comma-separated")
	partitions := fs.Int("partitions", 6, "the partitions of each")
	_ = fs.Parse(args)
	var ps []int
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("-ports %q: %v", *ports, err)
		}
		ps = append(ps, n)
	}
	c, err := kfake.NewCluster(kfake.Ports(ps...), kfake.SeedTopics(int32(*partitions), strings.Split(*topics, ",")...))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("ready", strings.Join(c.ListenAddrs(), ","))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

func count(args []string) error {
	fs := flag.NewFlagSet("count", flag.ExitOnError)
	brokers := fs.String("brokers", "", "the cluster's addresses, comma-separated (required)")
	topic := fs.String("topic", "floodgate-events", "the topic")
	_ = fs.Parse(args)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	// The end of every partition now: the records to read.
	ends, err := endOffsets(cl, *topic)
	if err != nil {
		return err
	}
	left := int64(0)
	for _, e := range ends {
		left += e
	}
	ids := make(map[string]struct{}, left)
	records := int64(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for records < left {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %d of %d records: %w", records, left, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			records++
			for _, h := range r.Headers {
				if h.Key == "id" {
					ids[string(h.Value)] = struct{}{}
				}
			}
		})
	}
	fmt.Printf("records %d ids %d\n", records, len(ids))
	return nil
}

// endOffsets is the high watermark of each partition of topic.
func endOffsets(cl *kgo.Client, topic string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	var ends []int64
	var lerr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
		}
		ends = append(ends, o.Offset)
	})
	return ends, lerr
}

func record(args []string) error {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	brokers := fs.String("brokers", "", "the cluster's addresses, comma-separated (required)")
	topic := fs.String("topic", "floodgate-events", "the topic")
	rate := fs.Int("rate", 50000, "events a second")
	duration := fs.Duration("duration", 30*time.Second, "how long to record")
	spool := fs.String("spool", "", "the spool directory (required)")
	users := fs.Int("users", 20000, "distinct users (record keys)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	_ = fs.Parse(args)
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *spool == "" || *brokers == "" {
		return fmt.Errorf("record needs -brokers and -spool")
	}
	reg := prometheus.NewRegistry()
	c := events.Sink{Kind: events.SinkKafka, SpoolDir: *spool, Kafka: events.KafkaSink{
		Brokers: strings.Split(*brokers, ","), Topic: *topic, Acks: "all",
	}}
	r, err := events.NewRecorder(c, events.Options{Registerer: reg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	cpu0 := cpuTime()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	offered := 0
	for now := start; now.Sub(start) < *duration; now = <-tick.C {
		// As many as the time since the start asks for: a tick that came
		// late is made up at the next.
		due := int(float64(*rate) * now.Sub(start).Seconds())
		for ; offered < due; offered++ {
			u := "u" + strconv.Itoa(offered%*users)
			r.Audit(&events.Event{
				Type: events.TypeRateLimited, Route: "api", RequestID: strconv.Itoa(offered),
				Method: "GET", Path: "/api/activities/lucky-meal/receive", Limit: "user",
				Keys:    map[string][]string{"user": {u, "/api/activities/lucky-meal/receive"}, "ip": {"10.0.0.1"}},
				Headers: map[string][]string{"X-User-Id": {u}},
			})
		}
	}
	took := time.Since(start)
	// The spool drains: everything recorded is delivered.
	drainStart := time.Now()
	for time.Since(drainStart) < 2*time.Minute {
		if total(reg, "delivered") >= total(reg, "recorded") && total(reg, "recorded")+total(reg, "dropped")+total(reg, "failed") >= float64(offered) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	drain := time.Since(drainStart)
	cpu := cpuTime() - cpu0
	_ = r.Close()
	fmt.Printf("record: offered=%d recorded=%.0f delivered=%.0f dropped=%.0f failed=%.0f offered_rate=%.0f delivered_rate=%.0f drain_ms=%d cpu_us_per_event=%.2f\n",
		offered, total(reg, "recorded"), total(reg, "delivered"), total(reg, "dropped"), total(reg, "failed"),
		float64(offered)/took.Seconds(), total(reg, "delivered")/(took+drain).Seconds(), drain.Milliseconds(),
		cpu.Seconds()*1e6/float64(max(offered, 1)))
	return nil
}

// total is gateway_events_total of result, over the types.
func total(reg *prometheus.Registry, result string) float64 {
	mfs, _ := reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "gateway_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// cpuTime is the user and system CPU the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
