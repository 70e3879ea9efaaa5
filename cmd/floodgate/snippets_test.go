package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// snippet is one fenced block of Go in a document users read.
type snippet struct {
	file string // relative to the repository's root
	line int    // of the opening fence
	text string
}

// goSnippets returns the ```go blocks of the Markdown files named.
func goSnippets(t *testing.T, root string, files []string) []snippet {
	t.Helper()
	var out []snippet
	for _, name := range files {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var cur *snippet
		var b strings.Builder
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur == nil && strings.TrimSpace(line) == "```go":
				cur = &snippet{file: name, line: n}
				b.Reset()
			case cur != nil && strings.TrimSpace(line) == "```":
				cur.text = b.String()
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				b.WriteString(line)
				b.WriteByte('\n')
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if cur != nil {
			t.Errorf("%s:%d: a ```go block that never ends", name, cur.line)
		}
	}
	return out
}

// TestDocSnippetsCompile builds every Go block of the README and docs/ as
// the program it says it is: a reader who pastes one into a file of their
// own gets something that compiles against this module's API as it is.
func TestDocSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	snips := goSnippets(t, root, files)
	if len(snips) == 0 {
		t.Fatal("no ```go block in README.md or docs/: the README's library snippet is gone")
	}
	// The programs live in the module, under a directory go's ./...
	// patterns skip (its name starts with a dot), so they build against
	// this checkout rather than a published version.
	dir, err := os.MkdirTemp(root, ".snippets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, s := range snips {
		where := fmt.Sprintf("%s:%d", s.file, s.line)
		if !strings.HasPrefix(strings.TrimSpace(s.text), "package ") {
			t.Errorf("%s: a Go block must be a whole file, from its package clause, so that it can be pasted and built", where)
			continue
		}
		pkg := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(s.text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "vet", "./"+filepath.Base(dir)+"/"+fmt.Sprint(i))
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not build: %v\n%s", where, err, out)
		}
	}
}
