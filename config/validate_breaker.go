package config

// BreakerScope is whose calls a breaker's window counts
// (docs/configuration.md, breaker).
type BreakerScope string

// The scopes.
const (
	BreakerInstance BreakerScope = "instance" // this instance's calls; it decides alone
	BreakerFleet    BreakerScope = "fleet"    // every instance's sharing the Redis store
)

// breakerScope checks a breaker's scope: fleet shares the window in Redis,
// so it needs the Redis store. A fleet breaker on the memory store is
// refused rather than run as an instance's, so that an operator who means
// the fleet to open together learns that it would not.
func (v *validator) breakerScope(b *Breaker, p string) {
	sp := p + ".scope"
	switch b.Scope {
	case BreakerInstance:
	case BreakerFleet:
		if v.storeType != StoreRedis {
			v.errorf(sp, "scope fleet shares the breaker's window in Redis and needs store.type redis (store.type is %s); with the memory store each instance decides alone: scope instance", v.storeType)
		}
	default:
		v.errorf(sp, "unknown scope %q (instance, fleet)", b.Scope)
	}
}
