package spec

import (
	"net/http"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

// TokenFrom is where server.jwt j says a request carries its token.
func TokenFrom(j *config.JWT) jwtverify.From {
	if j.From.Source == config.SourceCookie {
		return jwtverify.From{Cookie: j.From.Name}
	}
	h := http.CanonicalHeaderKey(j.From.Name)
	return jwtverify.From{Header: h, BearerRequired: h == "Authorization"}
}
