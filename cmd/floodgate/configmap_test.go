package main

import (
	"os"
	"path/filepath"
	"testing"
)

// configMapVolume lays dir out as the kubelet does a ConfigMap volume:
// each version of the files in a "..TIMESTAMP" directory, a "..data"
// symlink to the current one, and each file a symlink through "..data".
type configMapVolume struct {
	t       *testing.T
	dir     string
	version int
	current string // the directory ..data points to
}

// update publishes a new version of the file floodgate.yaml the way the
// kubelet's atomic writer does: write the new directory, point a
// temporary link at it, rename the link over "..data", and remove the
// old directory. The floodgate.yaml link itself never changes.
func (v *configMapVolume) update(text string) {
	v.t.Helper()
	v.version++
	name := "..2026_12_02_19_00_0" + string(rune('0'+v.version)) + ".000000001"
	if err := os.Mkdir(filepath.Join(v.dir, name), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, name, "floodgate.yaml"), []byte(text), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if v.current != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.current)); err != nil {
			v.t.Fatal(err)
		}
	}
	v.current = name
	link := filepath.Join(v.dir, "floodgate.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "floodgate.yaml"), link); err != nil {
			v.t.Fatal(err)
		}
	}
}

// A ConfigMap update reaches a running serve: the kubelet never writes
// floodgate.yaml, only swaps the "..data" link under it, and the watch
// must take that for a change of the file.
func TestServeReloadOnConfigMapSwap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	vol := &configMapVolume{t: t, dir: f.dir}
	vol.update(f.yaml(baseConfig))
	p := f.serve()
	if code := p.status("/added"); code != 404 {
		t.Fatalf("GET /added before the update: %d, want 404", code)
	}

	vol.update(f.yaml(withRoute("added")))
	p.waitFor("the added route to be served", func() bool { return p.status("/added") == 200 })
	p.waitLog(`"level":"INFO","msg":"config reloaded".*"trigger":"file change"`)

	// A second swap, after the first version's directory was removed.
	vol.update(f.yaml(withRoute("second")))
	p.waitFor("the second route to be served", func() bool { return p.status("/second") == 200 })
	if code := p.status("/added"); code != 404 {
		t.Errorf("GET /added after the second update: %d, want 404", code)
	}
	if n := p.reloads("ok"); n != 2 {
		t.Errorf(`gateway_config_reloads_total{result="ok"} = %d, want 2`, n)
	}
}
