// Package tlsfiles reads the PEM files of a TLS listener: a certificate
// with its key, and the certificates that sign client certificates. The
// config's validation and the listener that reloads them read them alike,
// so that check refuses exactly what serve could not load.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// A PEMError is a file that holds no block of the kind it should, or
// that ends in a partial block or other text after its last block (a
// file half written, or cut short): all of it must be read, or a
// certificate chain would be served short.
type PEMError struct {
	Cert bool   // the certificate file (or a CA file), not the key file
	Want string // what it should hold
	// After, when set, names the last whole block, after which the file
	// holds a partial block or other text ("certificate 1").
	After string
}

func (e *PEMError) Error() string {
	if e.After != "" {
		return "holds a partial PEM block, or other text, after " + e.After
	}
	return "holds no PEM " + e.Want
}

// ErrMismatch is a key that is not the certificate's.
var ErrMismatch = errors.New("the private key does not match the certificate's public key")

// ErrSwapped is a certificate file that holds a private key and no
// certificate, beside a key file that holds a certificate.
var ErrSwapped = errors.New("the certificate file holds a private key and the key file a certificate: are they swapped?")

func isCert(t string) bool { return t == "CERTIFICATE" }
func isKey(t string) bool  { return t == "PRIVATE KEY" || strings.HasSuffix(t, " PRIVATE KEY") }

// KeyPair parses a PEM certificate chain and its PEM private key; the
// certificate's Leaf is set.
func KeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	if !hasBlock(certPEM, isCert) {
		if hasBlock(certPEM, isKey) && hasBlock(keyPEM, isCert) {
			return tls.Certificate{}, ErrSwapped
		}
		return tls.Certificate{}, &PEMError{Cert: true, Want: "CERTIFICATE block"}
	}
	if !hasBlock(keyPEM, isKey) {
		return tls.Certificate{}, &PEMError{Want: "PRIVATE KEY block"}
	}
	if err := whole(certPEM, true); err != nil {
		return tls.Certificate{}, err
	}
	if err := whole(keyPEM, false); err != nil {
		return tls.Certificate{}, err
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
	if err := whole(caPEM, true); err != nil {
		return nil, err
	}
	return pool, nil
}

// whole checks that data, a file with at least one PEM block, holds
// nothing but white space after its last block. Text before a block is
// let be, as pem.Decode lets it be (openssl writes "Bag Attributes", or
// a certificate's text, there).
func whole(data []byte, cert bool) error {
	certs, blocks, last := 0, 0, ""
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(rest)) == 0 {
				return nil
			}
			return &PEMError{Cert: cert, After: last}
		}
		blocks++
		switch {
		case cert && isCert(b.Type):
			certs++
			last = fmt.Sprintf("certificate %d", certs)
		case !cert && isKey(b.Type):
			last = "the private key"
		default:
			last = fmt.Sprintf("block %d (%s)", blocks, b.Type)
		}
	}
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
