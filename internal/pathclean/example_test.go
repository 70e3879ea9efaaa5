package pathclean_test

import (
	"errors"
	"fmt"

	"github.com/floodgate-gw/floodgate/internal/pathclean"
)

func ExampleClean() {
	for _, p := range []string{
		"/api/v1/users",
		"/api//v1/./users/",
		"/%61pi/v1/caf%c3%a9",
		"/api/%2e%2e/admin",
		"/api/a%2Fb",
		"/..",
	} {
		clean, err := pathclean.Clean(p)
		if errors.Is(err, pathclean.ErrBadPath) {
			fmt.Printf("%-22s 400: %v\n", p, err)
			continue
		}
		fmt.Printf("%-22s %s\n", p, clean)
	}
	// Output:
	// /api/v1/users          /api/v1/users
	// /api//v1/./users/      /api/v1/users
	// /%61pi/v1/caf%c3%a9    /api/v1/caf%C3%A9
	// /api/%2e%2e/admin      /admin
	// /api/a%2Fb             400: pathclean: bad path: encoded slash (%2F)
	// /..                    400: pathclean: bad path: '..' above the root
}
