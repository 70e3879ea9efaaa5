package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// Three floodgate serve processes on one Redis each list the three in
// GET /admin/fleet, with the digest of the file each runs; the one whose
// file differs shows as disagreeing. The answer needs the admin token.
// The files name no address of their own (the flags give them), so that
// two of them are the same file.
func TestFleetView(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	var ps []*proc
	var digests []string
	up := newFixture(t, nil).upstream.URL
	for i := range 3 {
		f := newFixture(t, nil)
		text := strings.NewReplacer("{{REDIS}}", srv.Addr(), "{{UPSTREAM}}", up,
			"{{LISTEN}}", "127.0.0.1:1", "{{ADMIN}}", "127.0.0.1:2").Replace(fleetConfig)
		if i == 2 {
			text += "# edited on this instance only\n"
		}
		f.write(text)
		data, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		digests = append(digests, hex.EncodeToString(sum[:]))
		ps = append(ps, f.serve("--listen", f.listen, "--admin", f.admin))
	}
	fleetOf := func(p *proc) gateway.Fleet {
		t.Helper()
		r := p.admin("GET", "/admin/fleet")
		var f gateway.Fleet
		if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &f) != nil {
			t.Fatalf("GET /admin/fleet: %d %s", r.code, r.body)
		}
		return f
	}
	ids := make([]string, 3)
	for i, p := range ps {
		p.waitFor("three instances in /admin/fleet", func() bool { return len(fleetOf(p).Instances) == 3 })
		for _, in := range fleetOf(p).Instances {
			if in.Self {
				ids[i] = in.ID
				if in.Config != digests[i] || !strings.Contains(in.Version, "commit") || in.Store != "ok" {
					t.Errorf("instance %d about itself: %+v, want config %s", i, in, digests[i])
				}
			}
		}
	}
	for i, p := range ps {
		f := fleetOf(p)
		if f.Agree.Config || !f.Agree.Version || !slices.Equal(f.Disagreeing, []string{ids[2]}) {
			t.Errorf("instance %d: agree %+v, disagreeing %q; want config false and %q", i, f.Agree, f.Disagreeing, ids[2])
		}
	}
	if r := request(t, "GET", "http://"+ps[0].f.admin+"/admin/fleet"); r.code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d %s", r.code, r.body)
	}
	d := request(t, "GET", "http://"+ps[0].f.admin+"/dashboard.json").json(t)
	if fl, _ := d["fleet"].(map[string]any); fl["instances"] != 3.0 || len(fl["disagreeing"].([]any)) != 1 {
		t.Fatalf("dashboard fleet: %v", d["fleet"])
	}
}
