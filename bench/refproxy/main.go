// Command refproxy runs the two Go reverse proxies that the gateway issue
// gives as reference points for bench/proxy.sh — a stock
// httputil.ReverseProxy (≈ 0.31 × nginx where the issue was measured) and a
// bare, featureless net/http proxy with pooled buffers (≈ 0.5) — so that
// the ratios measured on another machine can be read against the issue's.
// Neither is part of floodgate. With -tls-cert and -tls-key it serves
// HTTPS instead, HTTP/2 or HTTP/1.1 by ALPN, as net/http's server does by
// itself (bench/edge.sh).
//
//	go run ./bench/refproxy -mode stock|bare -listen ADDR -upstream URL [-tls-cert FILE -tls-key FILE]
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

func main() {
	mode := flag.String("mode", "bare", "stock (httputil.ReverseProxy as it comes) or bare")
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:8081", "the upstream's URL")
	cert := flag.String("tls-cert", "", "PEM certificate file: serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN)")
	key := flag.String("tls-key", "", "PEM key file of -tls-cert")
	flag.Parse()
	if (*cert == "") != (*key == "") {
		log.Fatal("-tls-cert and -tls-key go together")
	}
	target, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	var h http.Handler
	switch *mode {
	case "stock":
		h = httputil.NewSingleHostReverseProxy(target)
	case "bare":
		h = bare(target)
	default:
		log.Fatalf("unknown mode %q", *mode)
	}
	srv := &http.Server{Addr: *listen, Handler: h}
	if *cert != "" {
		log.Fatal(srv.ListenAndServeTLS(*cert, *key))
	}
	log.Fatal(srv.ListenAndServe())
}

// bare forwards the inbound request as it is, through a transport that
// keeps enough idle connections, and copies the answer with pooled
// buffers: no hop-by-hop handling, no X-Forwarded-*, no timeouts beyond
// the dial's — the least a Go proxy can do.
func bare(target *url.URL) http.Handler {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4096,
		DisableCompression:  true,
	}
	bufs := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Scheme, r.URL.Host, r.Host, r.RequestURI = target.Scheme, target.Host, target.Host, ""
		if r.ContentLength == 0 {
			r.Body = nil
		}
		resp, err := tr.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vv := range resp.Header {
			w.Header()[k] = vv
		}
		w.WriteHeader(resp.StatusCode)
		bp := bufs.Get().(*[]byte)
		io.CopyBuffer(w, resp.Body, *bp)
		bufs.Put(bp)
	})
}
