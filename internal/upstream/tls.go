package upstream

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// TLS is the TLS configuration of a route's https targets
// (upstream.tls), its files read now: the system's roots unless t names a
// CA, no client certificate unless t names one, TLS 1.2 at least. id
// tells one configuration from another, the files' contents included, so
// that routes share a client only when they speak the same TLS, and a
// reload after a certificate was renewed makes a client that presents
// the new one.
func TLS(t *config.UpstreamTLS) (cfg *tls.Config, id string, err error) {
	cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return cfg, "", nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %t", t.ServerName, t.CA, t.InsecureSkipVerify)
	read := func(key, path string) ([]byte, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls.%s: %w", key, err)
		}
		fmt.Fprintf(h, " %s %d:", key, len(data))
		h.Write(data)
		return data, nil
	}
	cfg.ServerName = t.ServerName
	cfg.InsecureSkipVerify = t.InsecureSkipVerify
	if t.CA != "" {
		data, err := read("ca", t.CA)
		if err != nil {
			return nil, "", err
		}
		if cfg.RootCAs, err = tlsfiles.CertPool(data); err != nil {
			return nil, "", fmt.Errorf("upstream.tls.ca: %q: %w", t.CA, err)
		}
	}
	if t.Cert != "" || t.Key != "" {
		certData, err := read("cert", t.Cert)
		if err != nil {
			return nil, "", err
		}
		keyData, err := read("key", t.Key)
		if err != nil {
			return nil, "", err
		}
		cert, err := tlsfiles.KeyPair(certData, keyData)
		if err != nil {
			return nil, "", fmt.Errorf("upstream.tls: cert %q, key %q: %w", t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, hex.EncodeToString(h.Sum(nil)), nil
}
