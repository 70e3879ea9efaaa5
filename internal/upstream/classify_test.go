package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/h1"
)

// What the upstream client's errors are to the breaker and the client:
// the request's own faults are 4xx and no failure of the upstream's.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		client bool
		failed bool
	}{
		{fmt.Errorf("writing: %w", h1.ErrRequestBody), http.StatusBadRequest, true, false},
		{fmt.Errorf("method: %w", h1.ErrInvalidRequest), http.StatusBadRequest, true, false},
		{&http.MaxBytesError{Limit: 1}, http.StatusRequestEntityTooLarge, true, false},
		{errors.New("connection reset"), http.StatusBadGateway, false, true},
	} {
		o := classify(context.Background(), c.err)
		if client := o.End == ClientBody; o.Status != c.status || client != c.client || o.Failed() != c.failed {
			t.Errorf("%v: status %d client %v failed %v, want %d %v %v", c.err, o.Status, client, o.Failed(), c.status, c.client, c.failed)
		}
	}
}
