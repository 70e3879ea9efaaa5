package deploy_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/needs"
)

// The checks below read the compose file and the Kubernetes manifests as
// Docker and the API server would, and hold them to what floodgate does:
// each config they mount passes floodgate check where they mount it, and
// the probes, ports, scrape targets and mounts meet the listeners that
// config opens.

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// floodgate builds the binary once for the package's tests, to run
// floodgate check as a user runs it.
func floodgate(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "floodgate-deploy-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "floodgate")
		out, err := exec.Command("go", "build", "-o", buildBin, "github.com/floodgate-gw/floodgate/cmd/floodgate").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// checkConfig runs floodgate check -c file in dir, as a container whose
// working directory is dir, with env (and nothing else of this
// environment but PATH). It parses the config too, for the listeners it
// opens; the parse reads env as the check did.
func checkConfig(t *testing.T, dir, file string, env map[string]string) *config.Config {
	t.Helper()
	cmd := exec.Command(floodgate(t), "check", "-c", file)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("floodgate check -c %s (in %s): %v\n%s", file, dir, err, out)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(file, data)
	if err != nil {
		t.Fatalf("%s passes check but does not parse: %v", file, err)
	}
	return cfg
}

// reachable fails t when addr is on the container's loopback, out of
// reach of the kubelet's probes, a healthcheck's peers and Prometheus.
func reachable(t *testing.T, what, addr string) {
	t.Helper()
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	if h != "" && h != "0.0.0.0" && h != "::" {
		t.Errorf("%s %q listens on one address of the container only; want every interface (\":PORT\")", what, addr)
	}
}

func listenPort(t *testing.T, what, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: port %q", what, addr, p)
	}
	return n
}

// hostPort splits a Redis address or an upstream target into its host
// and port.
func hostPort(t *testing.T, s string) (string, int) {
	t.Helper()
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		s = u.Host
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: port %q", s, p)
	}
	return h, n
}

// flagValue is the value of --name (or -name) in args, "" if none.
func flagValue(args []string, name string) string {
	for i, a := range args {
		for _, f := range []string{"-" + name, "--" + name} {
			if a == f && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v
			}
		}
	}
	return ""
}

// underMount reports whether dir is at or below one of mounts.
func underMount(dir string, mounts []string) bool {
	for _, m := range mounts {
		if dir == m || strings.HasPrefix(dir, strings.TrimSuffix(m, "/")+"/") {
			return true
		}
	}
	return false
}

func sameJWKS(t *testing.T, what string, got []byte) {
	t.Helper()
	want, err := os.ReadFile("../examples/jwt/test-jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		t.Errorf("%s is not a copy of examples/jwt/test-jwks.json, which it says it is", what)
	}
}

// The compose file.

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	WorkingDir  string            `yaml:"working_dir"`
	ReadOnly    bool              `yaml:"read_only"`
	CapDrop     []string          `yaml:"cap_drop"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Tmpfs       []string          `yaml:"tmpfs"`
	Ports       []string          `yaml:"ports"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

type bindMount struct{ src, dst string }

// mounts are the service's bind mounts, their sources relative to this
// folder (compose.yaml's), and the targets the container may write: the
// mounts without :ro, named volumes among them, and the tmpfs mounts.
func (s composeService) mounts(t *testing.T) (binds []bindMount, writable []string) {
	t.Helper()
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("volume %q: want SOURCE:TARGET[:MODE]", v)
		}
		ro := len(parts) == 3 && slices.Contains(strings.Split(parts[2], ","), "ro")
		if !ro {
			writable = append(writable, parts[1])
		}
		if strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/") {
			binds = append(binds, bindMount{src: filepath.Clean(parts[0]), dst: parts[1]})
		}
	}
	for _, m := range s.Tmpfs {
		dst, _, _ := strings.Cut(m, ":")
		writable = append(writable, dst)
	}
	return binds, writable
}

// hostPath is where the file the container sees at p comes from.
func hostPath(binds []bindMount, p string) (string, bool) {
	for _, b := range binds {
		if p == b.dst {
			return b.src, true
		}
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(b.dst, "/")+"/"); ok {
			return filepath.Join(b.src, rest), true
		}
	}
	return "", false
}

// env is the service's environment as the container gets it, with a
// value compose would take from the host (${VAR...}) replaced by a test
// one.
func (s composeService) env() map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if strings.Contains(v, "${") {
			v = "test-value-of-" + k
		}
		env[k] = v
	}
	return env
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("compose.yaml has no services")
	}
	return f
}

// gateways are the compose services that run floodgate serve.
func gateways(f composeFile) []string {
	var names []string
	for name, s := range f.Services {
		if len(s.Command) > 0 && s.Command[0] == "serve" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func TestCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("three gateways, Redis and Prometheus of the compose file; make check runs it")
	}
	f := readCompose(t)
	names := gateways(f)
	if len(names) != 3 {
		t.Fatalf("compose.yaml runs %d gateways (%v), want 3", len(names), names)
	}
	hostPorts := map[string]string{}
	for name, s := range f.Services {
		for _, p := range s.Ports {
			// [IP:]HOST:CONTAINER; the host side must be unique.
			host := p[:strings.LastIndex(p, ":")]
			if other, ok := hostPorts[host]; ok {
				t.Errorf("services %s and %s both publish %s", other, name, host)
			}
			hostPorts[host] = name
		}
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			}
		}
	}
	image := f.Services[names[0]].Image
	for _, name := range names {
		s := f.Services[name]
		t.Run(name, func(t *testing.T) {
			if s.Image != image {
				t.Errorf("image %q, and %s's %q", s.Image, names[0], image)
			}
			if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") {
				t.Errorf("read_only %v, cap_drop %v: want a read-only root and every capability dropped", s.ReadOnly, s.CapDrop)
			}
			cfg, dir := composeConfig(t, s)
			reachable(t, "server.listen", cfg.Server.Listen)
			reachable(t, "admin.listen", cfg.Admin.Listen)
			_, writable := s.mounts(t)
			if cfg.Events.SpoolDir != "" && !underMount(cfg.Events.SpoolDir, writable) {
				t.Errorf("events.spool_dir %s is not on a writable volume or tmpfs of a read-only container", cfg.Events.SpoolDir)
			}
			if j := cfg.Server.JWT; j != nil && j.JWKSFile != "" {
				b, err := os.ReadFile(filepath.Join(dir, j.JWKSFile))
				if err != nil {
					t.Fatal(err)
				}
				sameJWKS(t, filepath.Join(dir, j.JWKSFile), b)
			}
			server := listenPort(t, "server.listen", cfg.Server.Listen)
			a := listenPort(t, "admin.listen", cfg.Admin.Listen)
			published := map[int]bool{}
			for _, p := range s.Ports {
				n, err := strconv.Atoi(p[strings.LastIndex(p, ":")+1:])
				if err != nil {
					t.Fatalf("port %q", p)
				}
				published[n] = true
			}
			if !published[server] || !published[a] {
				t.Errorf("ports %v do not publish the gateway's %d and the admin listener's %d", s.Ports, server, a)
			}
			if hc := s.Healthcheck.Test; len(hc) < 2 || hc[0] != "CMD" || hc[1] != "/floodgate" {
				t.Errorf("healthcheck %v: the image has no shell; want [CMD, /floodgate, ctl, status, ...]", hc)
			} else if _, p := hostPort(t, flagValue(hc, "admin")); p != a {
				t.Errorf("healthcheck asks port %d, the admin listener is on %d", p, a)
			}
			for _, addr := range cfg.Store.Redis.Addrs {
				if h, _ := hostPort(t, addr); f.Services[h].Image == "" {
					t.Errorf("store.redis.addrs %s: no service %s", addr, h)
				} else if !strings.HasPrefix(f.Services[h].Image, "redis:") {
					t.Errorf("store.redis.addrs %s: service %s runs %s", addr, h, f.Services[h].Image)
				}
			}
			for _, r := range cfg.Routes {
				for _, u := range r.Upstream.Targets {
					h, p := hostPort(t, u.String())
					up, ok := f.Services[h]
					if !ok {
						t.Errorf("route %s: target %s: no service %s", r.ID, u, h)
						continue
					}
					if l := flagValue(up.Command, "listen"); l != "" && listenPort(t, h+" --listen", l) != p {
						t.Errorf("route %s: target %s, and %s listens on %s", r.ID, u, h, l)
					}
				}
			}
		})
	}
	if up, ok := f.Services["coupon-api"]; ok && up.Image != image {
		t.Errorf("coupon-api runs %q, the gateways %q: the mock upstream is floodgate's own image", up.Image, image)
	}
	t.Run("prometheus", func(t *testing.T) { composePrometheus(t, f, names) })
}

// composeConfig finds the config a gateway service runs in the folder
// it mounts, checks it there from the service's working directory, and
// returns it with that directory.
func composeConfig(t *testing.T, s composeService) (*config.Config, string) {
	t.Helper()
	binds, writable := s.mounts(t)
	file := flagValue(s.Command, "c")
	if file == "" || !path.IsAbs(file) {
		t.Fatalf("command %v: want serve -c with an absolute path", s.Command)
	}
	src, ok := hostPath(binds, path.Dir(file))
	if !ok {
		t.Fatalf("the config's folder %s is not bind-mounted (mount the folder: a single-file mount misses updates)", path.Dir(file))
	}
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		t.Fatalf("%s, mounted at %s, is not a folder (mount the folder: a single-file mount misses updates)", src, path.Dir(file))
	}
	if underMount(path.Dir(file), writable) {
		t.Errorf("the config folder %s is mounted writable; mount it :ro", path.Dir(file))
	}
	// Relative paths in the config are the working directory's: the
	// image sets none, so it is / unless working_dir says otherwise.
	wd := cmp.Or(s.WorkingDir, "/")
	dir, ok := hostPath(binds, wd)
	if !ok {
		t.Fatalf("working_dir %s is not a mounted folder: the config's relative paths would not be its files", wd)
	}
	rel, err := filepath.Rel(dir, filepath.Join(src, path.Base(file)))
	if err != nil {
		t.Fatal(err)
	}
	return checkConfig(t, dir, rel, s.env()), dir
}

// composePrometheus lays the files the prometheus service mounts out as
// the container sees them, and checks its scrape targets are the
// gateways' admin listeners and its rule files are there.
func composePrometheus(t *testing.T, f composeFile, gateways []string) {
	s, ok := f.Services["prometheus"]
	if !ok {
		t.Fatal("compose.yaml has no prometheus service")
	}
	binds, _ := s.mounts(t)
	root := t.TempDir()
	for _, b := range binds {
		data, err := os.ReadFile(b.src)
		if err != nil {
			t.Fatalf("prometheus mounts %s: %v", b.src, err)
		}
		dst := filepath.Join(root, filepath.FromSlash(b.dst))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := flagValue(s.Command, "config.file")
	if file == "" {
		file = "/etc/prometheus/prometheus.yml" // the image's default
	}
	conf := filepath.Join(root, filepath.FromSlash(file))
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatalf("--config.file %s is not mounted: %v", file, err)
	}
	var p struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.RuleFiles) == 0 {
		t.Error("no rule_files: the alert rules are not loaded")
	}
	for _, r := range p.RuleFiles {
		if _, err := os.Stat(filepath.Join(filepath.Dir(conf), r)); err != nil {
			t.Errorf("rule_files %s: not mounted beside %s", r, file)
		}
	}
	var want, got []string
	for _, g := range gateways {
		cfg, _ := composeConfig(t, f.Services[g])
		want = append(want, fmt.Sprintf("%s:%d", g, listenPort(t, "admin.listen", cfg.Admin.Listen)))
	}
	for _, sc := range p.ScrapeConfigs {
		if sc.JobName != "floodgate" {
			continue
		}
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %s, want /metrics", sc.MetricsPath)
		}
		for _, c := range sc.StaticConfigs {
			got = append(got, c.Targets...)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("job floodgate scrapes %v, want the gateways' admin listeners %v", got, want)
	}
	if out, err := exec.Command(needs.Program(t, "prometheus", "promtool"), "check", "config", conf).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// The Kubernetes manifests.

type object struct {
	file       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec yaml.Node         `yaml:"spec"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type deploymentSpec struct {
	Replicas *int          `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec podSpec `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		EmptyDir *yaml.Node `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

type container struct {
	Name       string   `yaml:"name"`
	Image      string   `yaml:"image"`
	Args       []string `yaml:"args"`
	WorkingDir string   `yaml:"workingDir"`
	Ports      []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

// port resolves a port of the container, by number or by name.
func (c container) port(t *testing.T, n yaml.Node) int {
	t.Helper()
	if p, err := strconv.Atoi(n.Value); err == nil {
		return p
	}
	for _, p := range c.Ports {
		if p.Name == n.Value {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, n.Value)
	return 0
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string    `yaml:"name"`
		Port       int       `yaml:"port"`
		TargetPort yaml.Node `yaml:"targetPort"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	MinAvailable   *int          `yaml:"minAvailable"`
	MaxUnavailable *int          `yaml:"maxUnavailable"`
	Selector       labelSelector `yaml:"selector"`
}

func readManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var objs []object
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(k.Resources, filepath.Base(file)) {
			t.Errorf("kustomization.yaml does not list %s", filepath.Base(file))
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: document %d has no apiVersion, kind or metadata.name", file, i)
			}
			o.file = file
			objs = append(objs, o)
		}
	}
	for _, r := range k.Resources {
		if !slices.Contains(files, filepath.Join("kubernetes", r)) {
			t.Errorf("kustomization.yaml lists %s, which is not there", r)
		}
	}
	return objs
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s in kubernetes/", kind, name)
	return object{}
}

func decodeSpec[T any](t *testing.T, o object) T {
	t.Helper()
	var s T
	if err := o.Spec.Decode(&s); err != nil {
		t.Fatalf("%s: %s %s: spec: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
	return s
}

// selects reports whether a selector's labels are all among labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// reaches is the container port a Service's port reaches in the
// Deployment that its selector picks, 0 if none.
func reaches(t *testing.T, objs []object, svc serviceSpec, port int) int {
	t.Helper()
	for _, p := range svc.Ports {
		if p.Port != port {
			continue
		}
		for _, o := range objs {
			if o.Kind != "Deployment" {
				continue
			}
			d := decodeSpec[deploymentSpec](t, o)
			if !selects(svc.Selector, d.Template.Metadata.Labels) {
				continue
			}
			for _, c := range d.Template.Spec.Containers {
				tp := p.TargetPort
				if tp.Value == "" {
					tp.Value = strconv.Itoa(p.Port)
				}
				if n, err := strconv.Atoi(tp.Value); err == nil {
					return n
				}
				for _, cp := range c.Ports {
					if cp.Name == tp.Value {
						return cp.ContainerPort
					}
				}
			}
		}
	}
	return 0
}

func TestKubernetes(t *testing.T) {
	objs := readManifests(t)
	dep := find(t, objs, "Deployment", "floodgate")
	d := decodeSpec[deploymentSpec](t, dep)
	if d.Replicas == nil || *d.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Replicas)
	}
	pod := d.Template.Spec
	if !selects(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Fatalf("selector %v does not select the pod's labels %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want floodgate alone", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The config: the ConfigMap as the kubelet lays it out, checked
	// where the container runs it.
	file := flagValue(c.Args, "c")
	if file == "" || !path.IsAbs(file) {
		t.Fatalf("args %v: want serve -c with an absolute path", c.Args)
	}
	var cmName, mountPath string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			if m.SubPath != "" {
				t.Errorf("volumeMount %s uses subPath %s: a subPath mount never receives the ConfigMap's updates", m.Name, m.SubPath)
			}
			if m.MountPath == path.Dir(file) {
				cmName, mountPath = v.ConfigMap.Name, m.MountPath
				if !m.ReadOnly {
					t.Errorf("volumeMount %s is not readOnly", m.Name)
				}
			}
		}
	}
	if cmName == "" {
		t.Fatalf("no ConfigMap volume is mounted at %s, the folder of -c %s", path.Dir(file), file)
	}
	cm := find(t, objs, "ConfigMap", cmName)
	if _, ok := cm.Data[path.Base(file)]; !ok {
		t.Fatalf("ConfigMap %s has no key %s", cmName, path.Base(file))
	}
	if c.WorkingDir != mountPath {
		t.Errorf("workingDir %q: the config's relative paths are the ConfigMap's files only from %s", c.WorkingDir, mountPath)
	}
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "test-value-of-" + e.Name
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	cfg := checkConfig(t, dir, path.Base(file), env)
	reachable(t, "server.listen", cfg.Server.Listen)
	reachable(t, "admin.listen", cfg.Admin.Listen)
	if j := cfg.Server.JWT; j != nil && j.JWKSFile != "" && !path.IsAbs(j.JWKSFile) {
		sameJWKS(t, "ConfigMap "+cmName+" "+j.JWKSFile, []byte(cm.Data[j.JWKSFile]))
	}
	server := listenPort(t, "server.listen", cfg.Server.Listen)
	admin := listenPort(t, "admin.listen", cfg.Admin.Listen)

	// A rolling update: the pod serves on while the endpoints forget
	// it, then drains, and all of that before the kubelet kills it.
	if cfg.Server.ShutdownDelay == 0 {
		t.Error("server.shutdown_delay is 0: connections that arrive while the Service's endpoints forget a stopping pod are refused")
	}
	grace := 30 * time.Second // Kubernetes' default
	if g := pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if need := cfg.Server.ShutdownDelay + cfg.Server.ShutdownTimeout; need >= grace {
		t.Errorf("shutdown_delay + shutdown_timeout = %v, not within terminationGracePeriodSeconds %v", need, grace)
	}

	// Probes and scrapes meet the admin listener.
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{
		{"readinessProbe", "/readyz", c.ReadinessProbe},
		{"livenessProbe", "/healthz", c.LivenessProbe},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s over HTTP", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s asks %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if got := c.port(t, p.probe.HTTPGet.Port); got != admin {
			t.Errorf("%s asks port %d, the admin listener is on %d", p.name, got, admin)
		}
	}
	ann := d.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(admin) {
		t.Errorf("scrape annotations %v, want scrape \"true\", path /metrics, port %d", ann, admin)
	}
	ports := map[int]bool{}
	for _, p := range c.Ports {
		ports[p.ContainerPort] = true
	}
	if !ports[server] || !ports[admin] {
		t.Errorf("containerPorts %v: want the gateway's %d and the admin listener's %d", slices.Sorted(maps.Keys(ports)), server, admin)
	}

	// The image runs as 65532 on a read-only root: what it writes must be
	// on a volume.
	for _, ct := range pod.Containers {
		if ct.Resources.Requests["cpu"] == "" || ct.Resources.Requests["memory"] == "" ||
			ct.Resources.Limits["cpu"] == "" || ct.Resources.Limits["memory"] == "" {
			t.Errorf("container %s: want cpu and memory requests and limits, have %+v", ct.Name, ct.Resources)
		}
		sc := ct.SecurityContext
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot)
		if !nonRoot || !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s: securityContext %+v: want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL", ct.Name, sc)
		}
	}
	if u := pod.SecurityContext.RunAsUser; u == nil || *u == 0 {
		t.Errorf("runAsUser %v: the image's user is 65532", u)
	}
	if sd := cfg.Events.SpoolDir; sd != "" {
		var writable []string
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.EmptyDir != nil && !m.ReadOnly {
					writable = append(writable, m.MountPath)
				}
			}
		}
		if !underMount(sd, writable) {
			t.Errorf("events.spool_dir %s is not on a writable volume of the read-only root", sd)
		}
	}

	// The Service and the budget pick the gateways.
	svc := decodeSpec[serviceSpec](t, find(t, objs, "Service", "floodgate"))
	if !selects(svc.Selector, d.Template.Metadata.Labels) {
		t.Errorf("Service floodgate selects %v, not the gateways %v", svc.Selector, d.Template.Metadata.Labels)
	}
	reached := false
	for _, p := range svc.Ports {
		reached = reached || reaches(t, objs, svc, p.Port) == server
		if reaches(t, objs, svc, p.Port) == admin {
			t.Errorf("Service floodgate port %d reaches the admin listener", p.Port)
		}
	}
	if !reached {
		t.Errorf("no port of Service floodgate reaches the gateway's %d", server)
	}
	pdb := decodeSpec[pdbSpec](t, find(t, objs, "PodDisruptionBudget", "floodgate"))
	if !selects(pdb.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget selects %v, not the gateways %v", pdb.Selector.MatchLabels, d.Template.Metadata.Labels)
	}
	switch {
	case pdb.MinAvailable == nil:
		t.Error("PodDisruptionBudget has no minAvailable")
	case d.Replicas != nil && (*pdb.MinAvailable < 1 || *pdb.MinAvailable >= *d.Replicas):
		t.Errorf("minAvailable %d of %d replicas: want at least 1, and fewer than all so that a node can drain", *pdb.MinAvailable, *d.Replicas)
	}

	// What the config reaches is a Service of the manifests (or the
	// user's own, for a name they do not define).
	addrs := slices.Clone(cfg.Store.Redis.Addrs)
	for _, r := range cfg.Routes {
		for _, u := range r.Upstream.Targets {
			addrs = append(addrs, u.String())
		}
	}
	for _, a := range addrs {
		h, p := hostPort(t, a)
		s := decodeSpec[serviceSpec](t, find(t, objs, "Service", h))
		if reaches(t, objs, s, p) == 0 {
			t.Errorf("%s: Service %s has no port %d reaching a Deployment", a, h, p)
		}
	}

	// One image: the gateways and the mock upstream run floodgate's.
	compose := readCompose(t)
	want := compose.Services[gateways(compose)[0]].Image
	for _, o := range objs {
		if o.Kind != "Deployment" {
			continue
		}
		for _, ct := range decodeSpec[deploymentSpec](t, o).Template.Spec.Containers {
			if name, _, _ := strings.Cut(ct.Image, ":"); name == "floodgate" && ct.Image != want {
				t.Errorf("Deployment %s runs %s, compose.yaml %s", o.Metadata.Name, ct.Image, want)
			}
			if name, _, _ := strings.Cut(ct.Image, ":"); name == "redis" && ct.Image != compose.Services["redis"].Image {
				t.Errorf("Deployment %s runs %s, compose.yaml %s", o.Metadata.Name, ct.Image, compose.Services["redis"].Image)
			}
		}
	}
}
