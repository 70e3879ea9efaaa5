package rehearse

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// attack is appended to every string a user or a target can put on the
// page: it tries to end the element, the attribute, the comment and the
// script it lands in, and carries an entity that must come back as typed.
const attack = ` "><script>alert(1)</script></script></title></pre><!-- x --> & &amp; 'q' "q" ` + "\u2028"

func TestWriteHTMLStructure(t *testing.T) {
	t.Parallel()
	r := testResult()
	doc := writePage(t, r, "flash sale")

	figs := elements(doc, "figure")
	if len(figs) != 2 {
		t.Fatalf("%d charts, want 2", len(figs))
	}
	for i, want := range []struct {
		caption string
		legend  []string
		strokes []string
		dashed  int
		yTicks  int
		xTicks  int
	}{
		{"requests per second", []string{"sent", "2xx", "429", "503", "other (504, err:timeout, 502, err:reset)"},
			[]string{"#666", "#2a9d4b", "#e08e00", "#d62728", "#8c564b"}, 1, 6, 4},
		{"latency (ms, log scale)", []string{"p50", "p99"}, []string{"#1f77b4", "#9467bd"}, 0, 5, 4},
	} {
		fig := figs[i]
		if got := text(elements(fig, "figcaption")[0]); got != want.caption {
			t.Errorf("chart %d is titled %q, want %q", i, got, want.caption)
		}
		var legend, swatches []string
		for _, span := range elements(fig, "span") {
			legend = append(legend, text(span))
			swatches = append(swatches, attr(elements(span, "i")[0], "style"))
		}
		if !slices.Equal(legend, want.legend) {
			t.Errorf("chart %d's legend: %q, want %q", i, legend, want.legend)
		}
		var strokes []string
		dashed := 0
		for j, p := range elements(fig, "path") {
			strokes = append(strokes, attr(p, "stroke"))
			if attr(p, "stroke-dasharray") != "" {
				dashed++
			}
			if !strings.HasPrefix(attr(p, "d"), "M") {
				t.Errorf("chart %d, series %d: path %q", i, j, attr(p, "d"))
			}
			if j < len(swatches) && swatches[j] != "background:"+strokes[j] {
				t.Errorf("chart %d, series %d: swatch %q, line %q", i, j, swatches[j], strokes[j])
			}
		}
		if !slices.Equal(strokes, want.strokes) || dashed != want.dashed {
			t.Errorf("chart %d's lines: %q (%d dashed), want %q (%d)", i, strokes, dashed, want.strokes, want.dashed)
		}
		var grid, axis int
		for _, l := range elements(fig, "line") {
			switch attr(l, "class") {
			case "grid":
				grid++
			case "axis":
				axis++
			}
		}
		if grid != want.yTicks || axis != want.xTicks+1 {
			t.Errorf("chart %d: %d grid lines and %d axis lines, want %d and %d", i, grid, axis, want.yTicks, want.xTicks+1)
		}
		svg := elements(fig, "svg")[0]
		for k, v := range map[string]string{"viewBox": "0 0 960 280", "data-left": "64", "data-right": "940", "data-top": "16", "data-bottom": "250"} {
			if got := attr(svg, k); got != v {
				t.Errorf("chart %d: svg %s=%q, want %q", i, k, got, v)
			}
		}
	}

	var table [][]string
	for _, tr := range elements(doc, "tr")[1:] {
		var cells []string
		for _, td := range elements(tr, "td") {
			cells = append(cells, text(td))
		}
		table = append(table, cells)
	}
	wantTable := [][]string{
		{"0", "200", "200", "0", "0", "0", "", "0", "1.2", "3.0"},
		{"1", "5000", "800", "4000", "150", "50", "504:25 err:timeout:15 502:5 err:reset:5", "3", "2.0", "3100.0"},
		{"2", "0", "0", "0", "0", "0", "", "0", "-", "-"},
	}
	if !reflect.DeepEqual(table, wantTable) {
		t.Errorf("table:\n%q\nwant\n%q", table, wantTable)
	}
	wantRows := []htmlRow{
		{T: 0, Sent: 200, OK: 200, P50: "1.2", P99: "3.0"},
		{T: 1, Sent: 5000, OK: 800, TooMany: 4000, Unavailable: 150, Other: 50, Dropped: 3,
			OtherBy: "504:25 err:timeout:15 502:5 err:reset:5", P50: "2.0", P99: "3100.0"},
		{T: 2, P50: "-", P99: "-"},
	}
	if rows := scriptRows(t, doc); !reflect.DeepEqual(rows, wantRows) {
		t.Errorf("the script's rows:\n%+v\nwant\n%+v", rows, wantRows)
	}
	var summary bytes.Buffer
	WriteSummary(&summary, r)
	if got := text(elements(doc, "pre")[0]); got != strings.TrimLeft(summary.String(), "\n") {
		t.Errorf("the page's summary:\n%s\nwant\n%s", got, summary.String())
	}

	// An empty run: both charts, no other line, no rows.
	doc = writePage(t, &Result{Profile: Profile{Shape: Const, Rate: 1, Duration: time.Second}}, "empty")
	if n := len(elements(doc, "figure")); n != 2 {
		t.Errorf("empty run: %d charts", n)
	}
	if n := len(elements(elements(doc, "figure")[0], "path")); n != 4 {
		t.Errorf("empty run: %d lines in the first chart, want 4", n)
	}
	if n := len(elements(doc, "tr")); n != 1 {
		t.Errorf("empty run: %d table rows, want the heading alone", n)
	}
	if rows := scriptRows(t, doc); len(rows) != 0 {
		t.Errorf("empty run: the script has rows %v", rows)
	}
}

// TestWriteHTMLHostile puts the attack into what reaches the page from
// outside — the title (the target's URL, a route id), the profile's
// shape, the statuses and error kinds that name the other line and the
// table's cells, and the error messages of the summary — and checks that
// the page has the elements and attributes of a page without it, and that
// every string comes back as it was given.
func TestWriteHTMLHostile(t *testing.T) {
	t.Parallel()
	result := func(s func(string) string) *Result {
		r := testResult()
		r.Profile = Profile{Shape: Shape(s("shape")), Rate: 5, Duration: 3 * time.Second}
		other := Breakdown{s("504"): 25, s("err:other"): 15}
		r.Seconds[1].OtherBy, r.Total.OtherBy = other, other
		r.Errors = map[string]int64{s("dial tcp"): 15}
		return r
	}
	plain := func(s string) string { return s }
	hostile := func(s string) string { return s + attack }
	title := "floodgate load: GET http://gw/api/route" + attack
	doc := writePage(t, result(hostile), title)
	compareShape(t, doc, writePage(t, result(plain), "floodgate load: GET http://gw/api/route"))

	for _, c := range []struct{ what, got, want string }{
		{"title", text(elements(doc, "title")[0]), title},
		{"heading", text(elements(doc, "h1")[0]), title},
		{"profile", text(elements(doc, "p")[0]), hostile("shape") + ": 5/s for 3s"},
		{"legend", text(elements(doc, "span")[4]), "other (" + hostile("504") + ", " + hostile("err:other") + ")"},
		{"table", text(elements(doc, "td")[16]), hostile("504") + ":25 " + hostile("err:other") + ":15"},
	} {
		if c.got != c.want {
			t.Errorf("the %s reads\n%q\nwant\n%q", c.what, c.got, c.want)
		}
	}
	summary := text(elements(doc, "pre")[0])
	for _, want := range []string{"other      " + hostile("504") + ":25 ", "15 × " + hostile("dial tcp") + "\n"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary does not contain %q:\n%s", want, summary)
		}
	}
	if rows := scriptRows(t, doc); rows[1].OtherBy != hostile("504")+":25 "+hostile("err:other")+":15" {
		t.Errorf("the script's row 1 has OtherBy %q", rows[1].OtherBy)
	}
}

// TestRenderHostile puts the attack into every string field of a page,
// including those only floodgate's own code fills today: chart titles,
// tick labels, paths and latencies.
func TestRenderHostile(t *testing.T) {
	t.Parallel()
	page := func(s func(string) string) htmlPage {
		return htmlPage{Title: s("title"), Profile: s("profile"), Summary: s("summary"),
			Charts: []chart{{Title: s("chart"), W: 960, H: 280, L: 64, R: 940, T: 16, B: 250, Seconds: 1,
				XTicks: []tick{{100, s("0s")}}, YTicks: []tick{{200, s("10")}},
				Series: []series{{Name: s("sent"), Color: "#AbC", Path: s("M1,1 "), Dashed: true}}}},
			Rows: []htmlRow{{T: 0, Sent: 1, OtherBy: s("by"), P50: s("1.0"), P99: s("2.0")}},
		}
	}
	plain := func(s string) string { return s }
	hostile := func(s string) string { return s + attack }
	d := page(hostile)
	doc := renderPage(t, &d)
	p := page(plain)
	compareShape(t, doc, renderPage(t, &p))

	td := elements(doc, "td")
	ticks := elements(doc, "text")
	for _, c := range []struct{ what, got, want string }{
		{"title", text(elements(doc, "title")[0]), d.Title},
		{"heading", text(elements(doc, "h1")[0]), d.Title},
		{"profile", text(elements(doc, "p")[0]), d.Profile},
		{"summary", text(elements(doc, "pre")[0]), d.Summary},
		{"chart title", text(elements(doc, "figcaption")[0]), d.Charts[0].Title},
		{"series name", text(elements(doc, "span")[0]), d.Charts[0].Series[0].Name},
		{"y tick", text(ticks[0]), d.Charts[0].YTicks[0].Label},
		{"x tick", text(ticks[1]), d.Charts[0].XTicks[0].Label},
		{"path", attr(elements(doc, "path")[0], "d"), d.Charts[0].Series[0].Path},
		{"other was", text(td[6]), d.Rows[0].OtherBy},
		{"p50", text(td[8]), d.Rows[0].P50},
		{"p99", text(td[9]), d.Rows[0].P99},
	} {
		if c.got != c.want {
			t.Errorf("the %s reads\n%q\nwant\n%q", c.what, c.got, c.want)
		}
	}
	if rows := scriptRows(t, doc); !reflect.DeepEqual(rows, d.Rows) {
		t.Errorf("the script's rows:\n%+v\nwant\n%+v", rows, d.Rows)
	}

	// The rows' strings reach the script as JSON escapes, never as "<".
	out, err := d.render()
	if err != nil {
		t.Fatal(err)
	}
	_, data, _ := strings.Cut(text(elements(doc, "script")[0]), "var rows = ")
	data, _, _ = strings.Cut(data, "\n")
	if strings.ContainsAny(data, "<>&") || !strings.Contains(data, `\u003c/script\u003e`) {
		t.Errorf("the script's data is not escaped:\n%s", data)
	}
	if n := strings.Count(string(out), "</script>"); n != 1 {
		t.Errorf(`"</script>" appears %d times, want once, at the end of the script`, n)
	}
}

func TestRenderRefusesColor(t *testing.T) {
	t.Parallel()
	for _, color := range []string{"", "#", "#12", "#12345", "#1234567", "#ggg", "red", "#fff;background:url(x)", `#fff"onload="x`, "666"} {
		d := htmlPage{Charts: []chart{{Series: []series{{Name: "sent", Color: color}}}}}
		if _, err := d.render(); err == nil || !strings.Contains(err.Error(), "not a hex color") {
			t.Errorf("color %q: %v, want it refused as not a hex color", color, err)
		}
	}
	for _, color := range []string{"#666", "#abcd", "#2a9d4b", "#2A9D4B80"} {
		d := htmlPage{Charts: []chart{{Series: []series{{Name: "sent", Color: color}}}}}
		if _, err := d.render(); err != nil {
			t.Errorf("color %q: %v", color, err)
		}
	}
}

func writePage(t *testing.T, r *Result, title string) *html.Node {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, r, title); err != nil {
		t.Fatal(err)
	}
	return parse(t, b.Bytes())
}

func renderPage(t *testing.T, d *htmlPage) *html.Node {
	t.Helper()
	out, err := d.render()
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

func parse(t *testing.T, page []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// compareShape checks that got has the elements of want, in order, each
// with the same attributes, and no comments: whatever the strings in it,
// they added no element, attribute or script.
func compareShape(t *testing.T, got, want *html.Node) {
	t.Helper()
	g, w := shape(got), shape(want)
	if !slices.Equal(g, w) {
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("element %d is %q, want %q (%d elements, want %d)", i, g[i], w[i], len(g), len(w))
			}
		}
		t.Fatalf("%d elements, want %d; the last: %q", len(g), len(w), g[len(g)-1])
	}
	if n := len(elements(got, "script")); n != 1 {
		t.Errorf("%d scripts, want 1", n)
	}
}

// shape lists n's elements in document order, each with its attributes'
// names, and its comments.
func shape(n *html.Node) []string {
	var out []string
	for c := range n.Descendants() {
		switch c.Type {
		case html.ElementNode:
			s := c.Data
			for _, a := range c.Attr {
				s += " " + a.Key
			}
			out = append(out, s)
		case html.CommentNode:
			out = append(out, "<!--"+c.Data+"-->")
		}
	}
	return out
}

func elements(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && c.Data == tag {
			out = append(out, c)
		}
	}
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// scriptRows decodes the rows the page's script charts under the pointer.
func scriptRows(t *testing.T, doc *html.Node) []htmlRow {
	t.Helper()
	script := text(elements(doc, "script")[0])
	_, data, ok := strings.Cut(script, "var rows = ")
	data, _, ok2 := strings.Cut(data, " || [];\n")
	if !ok || !ok2 {
		t.Fatalf("the script has no rows:\n%s", script)
	}
	var rows []htmlRow
	if err := json.Unmarshal([]byte(data), &rows); err != nil {
		t.Fatalf("the script's rows are not JSON: %v\n%s", err, data)
	}
	return rows
}
