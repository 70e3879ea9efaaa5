package config

import (
	"errors"
	"io/fs"
	"os"

	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// rlsTLS checks rls.tls: a certificate and its key, both given, both PEM,
// matching each other, and a client CA file that holds certificates. The
// files are read here so that check refuses what serve could not load.
func (v *validator) rlsTLS(r *RLS) {
	t := r.TLS
	if t == nil {
		return
	}
	const p = "rls.tls"
	if r.Listen == "" {
		v.errorf(p, "set, but rls.listen is empty, so no service would use it")
	}
	if t.Cert == "" && t.Key == "" {
		v.errorf(p, "needs cert and key: the certificate the service presents")
	}
	v.halfPair(p, t.Cert, t.Key)
	if t.ClientCA == "" && v.has(p+".client_ca") {
		v.errorf(p+".client_ca", `empty: leave it out for no client certificates`)
	}
	v.keyPair(p, t.Cert, t.Key, "clients that verify it will refuse it")
	v.certPool(p+".client_ca", t.ClientCA)
}

// halfPair refuses a cert of block p without its key, or a key without
// its cert.
func (v *validator) halfPair(p, certPath, keyPath string) {
	switch {
	case certPath == "" && keyPath != "":
		v.errorf(p+".cert", "empty, but key is set: give the certificate of the key")
	case certPath != "" && keyPath == "":
		v.errorf(p+".key", "empty, but cert is set: give the private key of the certificate")
	}
}

// keyPair checks the certificate and key files of the block at p, when
// both are given: PEM, and matching. A certificate expired or not yet
// valid is a warning, which expired says the effect of.
func (v *validator) keyPair(p, certPath, keyPath, expired string) {
	certData := v.tlsFile(p+".cert", certPath)
	keyData := v.tlsFile(p+".key", keyPath)
	if certData == nil || keyData == nil {
		return
	}
	cert, err := tlsfiles.KeyPair(certData, keyData)
	var pe *tlsfiles.PEMError
	switch {
	case errors.Is(err, tlsfiles.ErrSwapped):
		v.errorf(p+".cert", "%q holds a private key and no certificate, and key %q holds a certificate: are cert and key swapped?", certPath, keyPath)
	case errors.As(err, &pe) && pe.Cert:
		v.errorf(p+".cert", "%q: %v", certPath, err)
	case err != nil:
		v.errorf(p+".key", "%q: %v", keyPath, err)
	default:
		v.validity(p+".cert", certPath, cert.Leaf.NotBefore, cert.Leaf.NotAfter, expired)
	}
}

// certPool checks the CA file at p, when given: it holds certificates.
func (v *validator) certPool(p, path string) {
	if data := v.tlsFile(p, path); data != nil {
		if _, err := tlsfiles.CertPool(data); err != nil {
			v.errorf(p, "%q: %v", path, err)
		}
	}
}

// tlsFile reads the file at p, reporting at p why it cannot; nil when
// there is none to read.
func (v *validator) tlsFile(p, path string) []byte {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		why := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			why = pe.Err.Error()
		}
		v.errorf(p, "%q cannot be read: %s", path, why)
		return nil
	}
	return data
}
