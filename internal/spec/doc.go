// Package spec is what a configured route is before it serves requests:
// its match (Match) and its limits (Limit), with the parts their keys are
// made of (Part), as the gateway decides them and as events replay and
// the admin API rebuild a key from recorded values. A key made here from
// a request's values and one the gateway made for the request are the same
// key: one counter in the store.
package spec
