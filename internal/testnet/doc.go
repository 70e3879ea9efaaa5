// Package testnet holds network fixtures for tests: addresses that behave
// the same however many tests run at once.
package testnet
