package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNoTemplates keeps text/template out of the binary make build and
// make image link. A binary that links it keeps every exported method of
// every type, since a template may call any of them by name: floodgate is
// 18 MB without it and 33 MB with it. A new dependency that imports
// text/template or html/template, however deep, fails here with the
// packages that import it.
func TestNoTemplates(t *testing.T) {
	t.Parallel()
	// One package per line: its path, then what it imports.
	out, err := exec.Command("go", "list", "-deps", "-tags", makeTags(t),
		"-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		for _, tmpl := range []string{"text/template", "html/template"} {
			if pkg != "text/template" && pkg != "html/template" && slices.Contains(strings.Fields(imports), tmpl) {
				t.Errorf("%s imports %s, and the binary links it", pkg, tmpl)
			}
		}
	}
}

// makeTags returns the build tags the Makefile builds floodgate with.
func makeTags(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TAGS \?= *(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no TAGS")
	}
	return strings.TrimSpace(string(m[1]))
}
