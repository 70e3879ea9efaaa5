package fleetbus_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// The bus rides on a Redis store: its connection, prefix and timeout.
// While the store cannot reach Redis, every call of the bus fails at once
// with an error that wraps limit.ErrStoreUnavailable, as the store's do.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Options{
		Addrs:   []string{"127.0.0.1:1"}, // nothing listens here
		Timeout: 50 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	bus := fleetbus.New(store)
	_, err = bus.Announce(context.Background(), "gw-1", []byte(`{"version":"1.4.0"}`), 15*time.Second)
	fmt.Println(errors.Is(err, limit.ErrStoreUnavailable))
	// Output: true
}
