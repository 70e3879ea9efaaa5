package rehearse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// WriteHTML writes a self-contained page that charts r's series — the
// attempts sent and their answers per second, and p50 and p99 — as inline
// SVG, with a little inline script for the values under the pointer. The
// other answers are named by status and error kind: in the legend for the
// whole run, in the table and under the pointer for each second. It loads
// nothing from anywhere, so it can be mailed or attached to a ticket.
// title heads the page.
func WriteHTML(w io.Writer, r *Result, title string) error {
	var summary bytes.Buffer
	WriteSummary(&summary, r)
	d := htmlPage{
		Title:   title,
		Profile: r.Profile.String(),
		Summary: strings.TrimLeft(summary.String(), "\n"),
		Charts:  []chart{countsChart(r.Seconds, r.Total.OtherBy), latencyChart(r.Seconds)},
	}
	for _, s := range r.Seconds {
		row := htmlRow{T: s.T, Sent: s.Sent, OK: s.OK, TooMany: s.TooMany, Unavailable: s.Unavailable,
			Other: s.Other, OtherBy: s.OtherBy.String(), Dropped: s.Dropped, P50: "-", P99: "-"}
		if s.OK+s.TooMany+s.Unavailable+s.Other > 0 {
			row.P50, row.P99 = strconv.FormatFloat(ms(s.P50), 'f', 1, 64), strconv.FormatFloat(ms(s.P99), 'f', 1, 64)
		}
		d.Rows = append(d.Rows, row)
	}
	page, err := d.render()
	if err != nil {
		return err
	}
	_, err = w.Write(page)
	return err
}

type htmlPage struct {
	Title, Profile, Summary string
	Charts                  []chart
	Rows                    []htmlRow
}

type htmlRow struct {
	T                                              int
	Sent, OK, TooMany, Unavailable, Other, Dropped int64
	OtherBy                                        string // as Breakdown.String writes it
	P50, P99                                       string
}

// A chart is an SVG line chart in a viewBox of W×H, its plot area inside
// the margins.
type chart struct {
	Title          string
	W, H           float64
	L, R, T, B     float64 // the plot area's edges
	XTicks, YTicks []tick
	Series         []series
	Seconds        int
}

type tick struct {
	Pos   float64
	Label string
}

type series struct {
	Name, Color string
	Path        string
	Dashed      bool
}

func newChart(title string, seconds int) chart {
	c := chart{Title: title, W: 960, H: 280, L: 64, R: 940, T: 16, B: 250, Seconds: seconds}
	step := niceStep(float64(seconds), 12)
	for t := 0.0; t <= float64(seconds); t += step {
		c.XTicks = append(c.XTicks, tick{c.x(t), strconv.FormatFloat(t, 'f', -1, 64) + "s"})
	}
	return c
}

// x maps a time in seconds to the viewBox; a second's value is drawn at
// its middle.
func (c *chart) x(t float64) float64 {
	return c.L + (c.R-c.L)*t/float64(max(c.Seconds, 1))
}

// path draws the points (i+0.5, y(v)) for the values present, breaking the
// line where a value is missing.
func (c *chart) path(vals []float64, ok []bool, y func(float64) float64) string {
	var b strings.Builder
	pen := false
	for i, v := range vals {
		if !ok[i] {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		fmt.Fprintf(&b, "%s%.1f,%.1f ", cmd, c.x(float64(i)+0.5), y(v))
		pen = true
	}
	return b.String()
}

// countsChart charts the answers of each second; the other line is named
// by what the run's other answers were (otherBy, its total).
func countsChart(rows []Second, otherBy Breakdown) chart {
	c := newChart("requests per second", len(rows))
	top := 1.0
	for _, s := range rows {
		top = max(top, float64(s.Sent), float64(s.OK), float64(s.TooMany), float64(s.Unavailable), float64(s.Other))
	}
	step := niceStep(top, 6)
	top = math.Ceil(top/step) * step
	y := func(v float64) float64 { return c.B - (c.B-c.T)*v/top }
	for v := 0.0; v <= top; v += step {
		c.YTicks = append(c.YTicks, tick{y(v), strconv.FormatFloat(v, 'f', -1, 64)})
	}
	all := make([]bool, len(rows))
	for i := range all {
		all[i] = true
	}
	for _, s := range []struct {
		name, color string
		dashed      bool
		hideZero    bool // left out of a run where it is zero throughout
		get         func(Second) int64
	}{
		{"sent", "#666", true, false, func(s Second) int64 { return s.Sent }},
		{"2xx", "#2a9d4b", false, false, func(s Second) int64 { return s.OK }},
		{"429", "#e08e00", false, false, func(s Second) int64 { return s.TooMany }},
		{"503", "#d62728", false, false, func(s Second) int64 { return s.Unavailable }},
		{otherName(otherBy), "#8c564b", false, true, func(s Second) int64 { return s.Other }},
	} {
		vals := make([]float64, len(rows))
		seen := false
		for i, r := range rows {
			vals[i] = float64(s.get(r))
			seen = seen || vals[i] > 0
		}
		if s.hideZero && !seen {
			continue
		}
		c.Series = append(c.Series, series{s.name, s.color, c.path(vals, all, y), s.dashed})
	}
	return c
}

// otherName names the other line by the statuses and error kinds it
// counts, most first: "other (504, err:timeout)".
func otherName(b Breakdown) string {
	if len(b) == 0 {
		return "other"
	}
	return "other (" + strings.Join(b.Keys(), ", ") + ")"
}

func latencyChart(rows []Second) chart {
	c := newChart("latency (ms, log scale)", len(rows))
	p50, p99 := make([]float64, len(rows)), make([]float64, len(rows))
	ok := make([]bool, len(rows))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range rows {
		if s.OK+s.TooMany+s.Unavailable+s.Other == 0 {
			continue
		}
		ok[i] = true
		// A log scale needs a floor: 10 µs is below anything a network
		// round trip takes.
		p50[i], p99[i] = max(ms(s.P50), 0.01), max(ms(s.P99), 0.01)
		lo, hi = min(lo, p50[i]), max(hi, p99[i])
	}
	if lo > hi {
		lo, hi = 1, 10
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	y := func(v float64) float64 { return c.B - (c.B-c.T)*(math.Log10(v)-dlo)/(dhi-dlo) }
	for e := dlo; e <= dhi; e++ {
		c.YTicks = append(c.YTicks, tick{y(math.Pow(10, e)), strconv.FormatFloat(math.Pow(10, e), 'f', -1, 64)})
	}
	c.Series = []series{
		{"p50", "#1f77b4", c.path(p50, ok, y), false},
		{"p99", "#9467bd", c.path(p99, ok, y), false},
	}
	return c
}

// niceStep returns a step of 1, 2 or 5 × 10^k that cuts span into at most
// n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return max(m*mag, 1)
		}
	}
	return 10 * mag
}

// render writes the page by hand rather than with html/template: linking
// text/template makes the linker keep every exported method of every type
// in the binary, since a template may call any of them by name: floodgate
// is 18 MB without it and 33 MB with it. So every value is escaped here,
// by where it goes:
//
//   - text and attribute values (always double-quoted) with
//     html.EscapeString — the titles, the profile, the summary and the
//     series names carry what the user typed or the target answered: a
//     URL, a route id, an error message;
//   - numbers with strconv, which writes nothing that needs escaping;
//   - colors, which land in a style attribute where escaping alone would
//     still let "red;background:url(…)" through, must be hex colors;
//   - the rows for the script with encoding/json, whose default escaping
//     of <, > and & as \u003c, \u003e and \u0026 keeps "</script>" and
//     "<!--" in a string from ending the script. An Encoder with
//     SetEscapeHTML(false) would undo that.
func (d *htmlPage) render() ([]byte, error) {
	for _, c := range d.Charts {
		for _, s := range c.Series {
			if !isHexColor(s.Color) {
				return nil, fmt.Errorf("rehearse: series %q has the color %q, not a hex color", s.Name, s.Color)
			}
		}
	}
	rows, err := json.Marshal(d.Rows)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	put := func(s ...string) {
		for _, s := range s {
			b.WriteString(s)
		}
	}
	esc := html.EscapeString
	put(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>`, esc(d.Title), `</title>
`, pageStyle, `</head>
<body>
<h1>`, esc(d.Title), `</h1>
<p class="sub">`, esc(d.Profile), `</p>
`)
	for _, c := range d.Charts {
		put(`
<figure>
<figcaption>`, esc(c.Title), `</figcaption>
<div class="legend">`)
		for _, s := range c.Series {
			put(`<span><i style="background:`, esc(s.Color), `"></i>`, esc(s.Name), `</span>`)
		}
		l, r, t, bot := num(c.L), num(c.R), num(c.T), num(c.B)
		put(`</div>
<svg viewBox="0 0 `, num(c.W), ` `, num(c.H), `" data-left="`, l, `" data-right="`, r,
			`" data-top="`, t, `" data-bottom="`, bot, `">
`)
		for _, k := range c.YTicks {
			y := num(k.Pos)
			put(`<line class="grid" x1="`, l, `" x2="`, r, `" y1="`, y, `" y2="`, y, `"/><text x="`, num(c.L-6),
				`" y="`, num(k.Pos+4), `" text-anchor="end">`, esc(k.Label), "</text>\n")
		}
		for _, k := range c.XTicks {
			x := num(k.Pos)
			put(`<line class="axis" x1="`, x, `" x2="`, x, `" y1="`, bot, `" y2="`, num(c.B+4), `"/><text x="`, x,
				`" y="`, num(c.B+18), `" text-anchor="middle">`, esc(k.Label), "</text>\n")
		}
		put(`<line class="axis" x1="`, l, `" x2="`, r, `" y1="`, bot, `" y2="`, bot, "\"/>\n")
		for _, s := range c.Series {
			put(`<path class="line" d="`, esc(s.Path), `" stroke="`, esc(s.Color), `"`)
			if s.Dashed {
				put(` stroke-dasharray="5 4"`)
			}
			put("/>\n")
		}
		put(`<line class="cursor" x1="0" x2="0" y1="`, t, `" y2="`, bot, `" stroke="#999" visibility="hidden"/>
</svg>
<div class="tip"></div>
</figure>
`)
	}
	put(`
<pre>`, esc(d.Summary), `</pre>
<details><summary>per-second table</summary>
<table>
<tr><th>t</th><th>sent</th><th>2xx</th><th>429</th><th>503</th><th>other</th><th>other was</th><th>dropped</th><th>p50 ms</th><th>p99 ms</th></tr>
`)
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range d.Rows {
		put(`<tr><td>`, strconv.Itoa(r.T), `</td><td>`, i(r.Sent), `</td><td>`, i(r.OK), `</td><td>`, i(r.TooMany),
			`</td><td>`, i(r.Unavailable), `</td><td>`, i(r.Other), `</td><td class="by">`, esc(r.OtherBy),
			`</td><td>`, i(r.Dropped), `</td><td>`, esc(r.P50), `</td><td>`, esc(r.P99), "</td></tr>\n")
	}
	put(`</table>
</details>
<script>
(function(){
  var rows = `, string(rows), ` || [];
`, pageScript)
	return b.Bytes(), nil
}

// num writes a coordinate of the viewBox.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// isHexColor reports whether s is a CSS hex color: #rgb, #rgba, #rrggbb or
// #rrggbbaa.
func isHexColor(s string) bool {
	if !strings.HasPrefix(s, "#") {
		return false
	}
	switch len(s) - 1 {
	case 3, 4, 6, 8:
	default:
		return false
	}
	for _, c := range s[1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

const pageStyle = `<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:20px;margin:0 0 4px}
.sub{color:#666;margin:0 0 16px}
figure{margin:0 0 24px;position:relative}
figcaption{font-weight:600;margin-bottom:4px}
svg{width:100%;height:auto;display:block}
svg text{font-size:12px;fill:#555}
.grid{stroke:#e5e5e5}
.axis{stroke:#999}
.line{fill:none;stroke-width:2}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
.tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #bbb;padding:4px 8px;font-size:12px;white-space:pre;display:none}
pre{background:#f6f6f6;padding:12px;overflow:auto}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}
td.by{text-align:left}
</style>
`

// pageScript follows "var rows = …;": it shows the values of the second
// under the pointer. It sets the tip's textContent, never its HTML.
const pageScript = `  document.querySelectorAll("figure").forEach(function(fig){
    var svg = fig.querySelector("svg"), tip = fig.querySelector(".tip"), cur = svg.querySelector(".cursor");
    var l = +svg.dataset.left, r = +svg.dataset.right;
    svg.addEventListener("mousemove", function(ev){
      var box = svg.getBoundingClientRect(), scale = svg.viewBox.baseVal.width / box.width;
      var x = (ev.clientX - box.left) * scale;
      var i = Math.floor((x - l) / (r - l) * rows.length);
      if (i < 0 || i >= rows.length) { tip.style.display = "none"; cur.setAttribute("visibility", "hidden"); return; }
      var s = rows[i], cx = l + (r - l) * (i + 0.5) / rows.length;
      cur.setAttribute("x1", cx); cur.setAttribute("x2", cx); cur.setAttribute("visibility", "visible");
      tip.textContent = "t " + s.T + "s\nsent " + s.Sent + "  dropped " + s.Dropped +
        "\n2xx " + s.OK + "  429 " + s.TooMany + "  503 " + s.Unavailable + "  other " + s.Other + (s.OtherBy ? " (" + s.OtherBy + ")" : "") +
        "\np50 " + s.P50 + " ms  p99 " + s.P99 + " ms";
      tip.style.display = "block";
      tip.style.left = Math.min(ev.clientX - fig.getBoundingClientRect().left + 12, fig.clientWidth - 220) + "px";
      tip.style.top = "40px";
    });
    svg.addEventListener("mouseleave", function(){ tip.style.display = "none"; cur.setAttribute("visibility", "hidden"); });
  });
})();
</script>
</body>
</html>
`
