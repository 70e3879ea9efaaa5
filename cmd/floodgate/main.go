// Command floodgate is an API gateway and distributed rate-limit service.
//
// Run "floodgate -h" for the list of commands.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
