package upstream

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/h1"
)

// How each way an exchange can end reads to the breaker (Failed,
// Cancelled), the access log (whether it names an error, and which),
// and the handler (whether it must abort the connection). The rows are
// the gateway's behaviour before End replaced nine booleans; a row that
// changes is a change of behaviour.
func TestResultReadings(t *testing.T) {
	t.Parallel()
	reset := fmt.Errorf("read: %w", syscall.ECONNRESET)
	for _, tc := range []struct {
		name string
		r    Result
		grpc bool
		// failed, cancelled, the access log's error ("" none), abort
		failed, cancelled bool
		logged            string
		abort             bool
	}{
		{"no target", Result{Status: 502, Err: ErrNoTarget, End: NoTarget}, false, false, true, "no_healthy_target", false},
		{"refused before the head", Result{Status: 502, Err: reset, End: Failed}, false, true, false, "connection_reset", false},
		{"timeout before the head", Result{Status: 504, Err: reset, End: TimedOut}, false, true, false, "timeout", false},
		{"grpc deadline before the head", Result{Status: 504, Err: reset, End: Deadline}, true, false, true, "grpc_deadline", false},
		{"the client's body before the head", Result{Status: 400, Err: reset, End: ClientBody}, false, false, true, "", false},
		{"the client gone before the head", Result{Status: 499, Err: reset, End: ClientGone}, false, false, true, "", true},
		{"200", Result{Status: 200, End: Done, Head: true}, false, false, false, "", false},
		{"500", Result{Status: 500, End: Done, Head: true}, false, false, false, "", false},
		{"the upstream's own 499", Result{Status: 499, End: Done, Head: true}, false, false, true, "", false},
		{"send timeout", Result{Status: 499, Err: ErrSendTimeout, End: ClientGone, Head: true}, false, false, true, "send_timeout", true},
		{"the client's body after the head", Result{Status: 200, Err: reset, End: ClientBody, Head: true}, false, false, true, "bad_request", true},
		{"the client's body after the head, grpc", Result{Status: 200, Err: reset, End: ClientBody, Head: true}, true, false, true, "bad_request", false},
		{"the upstream broke off", Result{Status: 200, Err: reset, End: Failed, Head: true}, false, true, false, "body_broken", true},
		{"the upstream broke off, grpc", Result{Status: 200, Err: reset, End: Failed, Head: true}, true, true, false, "body_broken", false},
		{"the upstream fell silent", Result{Status: 200, Err: h1.ErrIdle, End: TimedOut, Head: true}, false, true, false, "body_idle", true},
		{"grpc deadline after the head", Result{Status: 200, Err: errGRPCDeadline, End: Deadline, Head: true}, true, false, true, "grpc_deadline", false},
		{"the client left after the head", Result{Status: 200, End: ClientGone, Head: true}, false, false, true, "", true},
		{"the client left after the head, grpc", Result{Status: 499, End: ClientGone, Head: true}, true, false, true, "", true},
		{"the upstream's 499, then broke off", Result{Status: 499, Err: reset, End: Failed, Head: true}, false, true, true, "body_broken", true},
		{"101 of another protocol", Result{Status: 502, Err: reset, End: Failed}, false, true, false, "connection_reset", false},
		{"101, the connection not taken over", Result{Status: 502, Err: reset, End: Unjoined}, false, false, false, "connection_reset", false},
		{"101, its write failed", Result{Status: 101, End: ClientGone, Head: true}, false, false, true, "", true},
		{"101, joined", Result{Status: 101, End: Done, Head: true}, false, false, false, "", false},
	} {
		r := tc.r
		logged := "" // as the gateway's logAccess reads it
		switch {
		case !r.Exchanged():
			if r.Err == ErrNoTarget {
				logged = "no_healthy_target"
			}
		case (r.Failed() || r.Err != nil && (r.End != ClientBody || r.Broken())) && !r.ClientGone():
			logged = r.Kind()
		}
		ended := tc.grpc && r.End != ClientGone // what the gateway's finish reads
		abort := r.Broken() && !ended || r.Status == StatusClientClosed && !r.Head
		if r.Failed() != tc.failed || r.Cancelled() != tc.cancelled || logged != tc.logged || abort != tc.abort {
			t.Errorf("%s: failed %v cancelled %v logged %q abort %v; want %v %v %q %v",
				tc.name, r.Failed(), r.Cancelled(), logged, abort, tc.failed, tc.cancelled, tc.logged, tc.abort)
		}
	}
}
