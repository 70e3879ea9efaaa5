package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// An Instance is one gateway instance of the fleet as GET /admin/fleet
// shows it: what it announced of itself, and when.
type Instance struct {
	ID      string `json:"id"`
	Self    bool   `json:"self,omitempty"` // the instance that answers
	Version string `json:"version"`
	// Config is the hex SHA-256 of the config file the instance runs.
	Config string `json:"config"`
	// OverridesVersion is the version of the runtime overrides in force;
	// null while the gateway has none.
	OverridesVersion *int64 `json:"overrides_version"`
	// Store is the store's health as the instance sees it: "ok", or
	// "failing" while its decisions go to on_error.
	Store    string    `json:"store"`
	Started  time.Time `json:"started"`
	Uptime   float64   `json:"uptime_seconds"`
	LastSeen time.Time `json:"last_seen"`
}

// Fleet is every instance alive in the store, and whether they agree.
type Fleet struct {
	Instances []Instance `json:"instances"`
	Agree     struct {
		Config    bool `json:"config"`
		Version   bool `json:"version"`
		Overrides bool `json:"overrides"`
	} `json:"agree"`
	// Disagreeing lists the instances whose config, version or version of
	// the runtime overrides is not the one most instances run.
	Disagreeing []string `json:"disagreeing"`
	// Skipped counts the live entries of the store that could not be
	// read as an instance's announcement: not written by floodgate, or
	// too large.
	Skipped int `json:"skipped"`
}

// announcement is what an instance writes of itself with each
// announcement. Floodgate is the format's version, 1.
type announcement struct {
	Floodgate        int       `json:"floodgate"`
	Version          string    `json:"version"`
	Config           string    `json:"config"`
	OverridesVersion *int64    `json:"overrides_version"`
	Store            string    `json:"store"`
	Started          time.Time `json:"started"`
}

// maxVersion bounds what an instance says of its version and config, so
// that an announcement stays far under fleetbus.MaxInfo.
const maxVersion = 200

// SetConfigDigest sets the digest of the config file the gateway runs,
// announced to the fleet (Options.ConfigDigest); call it after a reload.
func (g *Gateway) SetConfigDigest(digest string) {
	if len(digest) > maxVersion {
		digest = digest[:maxVersion]
	}
	g.digest.Store(&digest)
}

// self is this instance's announcement now.
func (g *Gateway) self() announcement {
	a := announcement{Floodgate: 1, Version: g.version, Store: "ok", Started: g.started}
	if d := g.digest.Load(); d != nil {
		a.Config = *d
	}
	if v := g.ovVersion.Load(); v != nil {
		a.OverridesVersion = v
	}
	if g.storeDown.Load() {
		a.Store = "failing"
	}
	return a
}

// Fleet reads the instances alive in the store. With a store that
// instances do not share, the fleet is this instance. An error wraps
// limit.ErrStoreUnavailable.
func (g *Gateway) Fleet(ctx context.Context) (Fleet, error) {
	bus := g.gen.Load().bus
	now := g.now()
	if bus == nil {
		return fleetOf([]Instance{g.instance(g.ids.Prefix(), g.self(), now, now, true)}, 0), nil
	}
	as, now, skipped, err := bus.Instances(ctx)
	if err != nil {
		return Fleet{}, err
	}
	var is []Instance
	for _, a := range as {
		var info announcement
		if a.Info == nil || json.Unmarshal(a.Info, &info) != nil || info.Floodgate != 1 ||
			len(info.Version) > maxVersion || len(info.Config) > maxVersion {
			skipped++
			continue
		}
		is = append(is, g.instance(a.ID, info, a.Seen, now, a.ID == g.ids.Prefix()))
	}
	return fleetOf(is, skipped), nil
}

func (g *Gateway) instance(id string, a announcement, seen, now time.Time, self bool) Instance {
	return Instance{
		ID: id, Self: self, Version: a.Version, Config: a.Config, OverridesVersion: a.OverridesVersion,
		Store: a.Store, Started: a.Started.UTC(), Uptime: max(0, now.Sub(a.Started).Seconds()), LastSeen: seen.UTC(),
	}
}

// fleetOf sorts the instances by id and finds those that disagree with
// the majority.
func fleetOf(is []Instance, skipped int) Fleet {
	slices.SortFunc(is, func(a, b Instance) int { return cmp.Compare(a.ID, b.ID) })
	f := Fleet{Instances: is, Disagreeing: []string{}, Skipped: skipped}
	if f.Instances == nil {
		f.Instances = []Instance{}
	}
	config := majority(is, func(i Instance) string { return i.Config })
	version := majority(is, func(i Instance) string { return i.Version })
	overrides := majority(is, overridesOf)
	f.Agree.Config, f.Agree.Version, f.Agree.Overrides = true, true, true
	for _, i := range is {
		if overridesOf(i) != overrides {
			f.Agree.Overrides = false
		}
		if i.Config != config {
			f.Agree.Config = false
		}
		if i.Version != version {
			f.Agree.Version = false
		}
		if i.Config != config || i.Version != version || overridesOf(i) != overrides {
			f.Disagreeing = append(f.Disagreeing, i.ID)
		}
	}
	return f
}

func overridesOf(i Instance) string {
	if i.OverridesVersion == nil {
		return ""
	}
	return strconv.FormatInt(*i.OverridesVersion, 10)
}

// majority is the value of f most instances have; of values as common,
// the least, so that every instance names the same one.
func majority(is []Instance, f func(Instance) string) string {
	n := map[string]int{}
	best := ""
	for _, i := range is {
		v := f(i)
		n[v]++
		if n[v] > n[best] || n[v] == n[best] && v < best {
			best = v
		}
	}
	return best
}
