// Package tlsfiles reads the PEM files of a TLS listener: a certificate
// with its key, and the certificates that sign client certificates. The
// config's validation and the listener that reloads them read them alike,
// so that check refuses exactly what serve could not load.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// A PEMError is a file that holds no block of the kind it should.
type PEMError struct {
	Cert bool   // the certificate file (or a CA file), not the key file
	Want string // what it should hold
}

func (e *PEMError) Error() string { return "holds no PEM " + e.Want }

// ErrMismatch is a key that is not the certificate's.
var ErrMismatch = errors.New("the private key does not match the certificate's public key")

// KeyPair parses a PEM certificate chain and its PEM private key; the
// certificate's Leaf is set.
func KeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	if !hasBlock(certPEM, func(t string) bool { return t == "CERTIFICATE" }) {
		return tls.Certificate{}, &PEMError{Cert: true, Want: "CERTIFICATE block"}
	}
	if !hasBlock(keyPEM, func(t string) bool { return t == "PRIVATE KEY" || strings.HasSuffix(t, " PRIVATE KEY") }) {
		return tls.Certificate{}, &PEMError{Want: "PRIVATE KEY block"}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, ErrMismatch
		}
		return tls.Certificate{}, err
	}
	// Go 1.23 and later set Leaf; a chain whose first block does not
	// parse has failed above.
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, err
		}
	}
	return cert, nil
}

// CertPool parses a PEM file of CA certificates; every CERTIFICATE block
// must parse, and there must be one.
func CertPool(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := caPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, &PEMError{Cert: true, Want: "CERTIFICATE block"}
	}
	return pool, nil
}

func hasBlock(data []byte, want func(typ string) bool) bool {
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if want(b.Type) {
			return true
		}
	}
}
