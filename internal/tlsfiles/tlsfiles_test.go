package tlsfiles

import (
	"bytes"
	"errors"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// A file must be read whole: one that ends in a partial block (a chain
// cut short, a rotation half written) or in other text is refused, and
// the error says after which block; white space after the last block,
// and text before a block, are let be.
func TestWholeFiles(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	pair := ca.Server(t, "a")
	chain := cat(pair.CertPEM, ca.PEM)

	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string // "": accepted
		certFile  bool
	}{
		{"a chain", chain, pair.KeyPEM, "", false},
		{"white space after", cat(chain, []byte("\n\n  \t\n")), cat(pair.KeyPEM, []byte("\n")), "", false},
		{"text before", cat([]byte("Bag Attributes\n    friendlyName: a\n"), chain), pair.KeyPEM, "", false},
		{"a chain cut short", cat(pair.CertPEM, ca.PEM[:300]), pair.KeyPEM, "holds a partial PEM block, or other text, after certificate 1", true},
		{"a chain cut after its BEGIN line", cat(chain, []byte("-----BEGIN CERTIFICATE-----\n")), pair.KeyPEM, "holds a partial PEM block, or other text, after certificate 2", true},
		{"text after the chain", cat(chain, []byte("garbage\n")), pair.KeyPEM, "holds a partial PEM block, or other text, after certificate 2", true},
		{"a key cut short", pair.CertPEM, cat(pair.KeyPEM, pair.KeyPEM[:40]), "holds a partial PEM block, or other text, after the private key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, err := KeyPair(tc.cert, tc.key)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cert.Leaf == nil || len(cert.Certificate) < 1 {
					t.Fatalf("certificate %+v", cert)
				}
				return
			}
			var pe *PEMError
			if !errors.As(err, &pe) || err.Error() != tc.want || pe.Cert != tc.certFile {
				t.Fatalf("KeyPair: %v (%#v), want %q of the cert file: %v", err, pe, tc.want, tc.certFile)
			}
		})
	}
	if cert, err := KeyPair(chain, pair.KeyPEM); err != nil || len(cert.Certificate) != 2 {
		t.Fatalf("a chain of two: %d certificates, %v", len(cert.Certificate), err)
	}

	if _, err := CertPool(cat(ca.PEM, []byte("\n"))); err != nil {
		t.Fatal(err)
	}
	_, err := CertPool(cat(ca.PEM, ca.PEM[:300]))
	var pe *PEMError
	if !errors.As(err, &pe) || !pe.Cert || err.Error() != "holds a partial PEM block, or other text, after certificate 1" {
		t.Fatalf("CertPool of a file cut short: %v", err)
	}
}

// A certificate file that holds the key, beside a key file that holds the
// certificate, is said to be swapped; a certificate file with only a key
// in it is not.
func TestSwapped(t *testing.T) {
	pair := testcerts.NewCA(t, "test CA").Server(t, "a")
	if _, err := KeyPair(pair.KeyPEM, pair.CertPEM); !errors.Is(err, ErrSwapped) {
		t.Fatalf("swapped: %v", err)
	}
	_, err := KeyPair(pair.KeyPEM, pair.KeyPEM)
	var pe *PEMError
	if !errors.As(err, &pe) || !pe.Cert || err.Error() != "holds no PEM CERTIFICATE block" {
		t.Fatalf("a key for the certificate: %v", err)
	}
}
