//go:build !unix

package testnet

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// RefusedURL is the URL of a server closed at once; a parallel test may
// take its port over, which the unix version rules out.
func RefusedURL(t testing.TB) string {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	return dead.URL
}
