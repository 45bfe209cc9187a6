//! One self-contained HTML file: every section's lines, tables and figures
//! (inline SVG from `plot.rs`), with its own stylesheet and nothing fetched
//! from anywhere, so it opens offline and can be mailed or archived. Its
//! content security policy forbids every load, so a browser would refuse
//! (and report) anything that tried.

use std::fmt::Write as _;

use super::{
    model::{Align, Block, Section},
    plot::{self, html_escape},
};

const STYLE: &str = "\
body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}\
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}\
nav a{margin-right:1em}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:.85em}\
table{border-collapse:collapse;font-size:.85em;margin:.8em 0}caption{text-align:left;font-weight:bold;padding:.3em 0}\
th,td{padding:.15em .6em;border-bottom:1px solid #e4e4e4}th{background:#f0f0f0}td.r{text-align:right}\
figure{margin:1em 0}svg{max-width:100%;height:auto}.error{color:#a00}";

/// The report as an HTML document; `title` names the recording.
pub fn render(title: &str, sections: &[Section]) -> String {
    let mut o = String::new();
    let title = html_escape(title);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>vtrace report: {title}</title>\
         <style>{STYLE}</style></head>\n<body>\n<h1>vtrace report: {title}</h1>\n<nav>"
    );
    let shown: Vec<&Section> = sections.iter().filter(|s| !s.blocks.is_empty()).collect();
    for s in &shown {
        let _ = write!(o, "<a href=\"#{}\">{}</a>", s.id, html_escape(s.title));
    }
    o.push_str("</nav>\n");
    for s in shown {
        let _ = writeln!(
            o,
            "<section id=\"{}\" class=\"section\">\n<h2>{}</h2>",
            s.id,
            html_escape(s.title)
        );
        for block in &s.blocks {
            match block {
                Block::Lines(lines) => {
                    let text: Vec<&str> = lines.iter().map(|l| l.as_str()).collect();
                    let text = text.join("\n");
                    if !text.trim().is_empty() {
                        let _ = writeln!(o, "<pre>{}</pre>", html_escape(text.trim_matches('\n')));
                    }
                }
                Block::Table(t) => {
                    o.push_str("<table>");
                    if let Some(title) = &t.title {
                        let _ = write!(o, "<caption>{}</caption>", html_escape(title));
                    }
                    o.push_str("<thead><tr>");
                    for c in &t.columns {
                        let _ = write!(o, "<th>{}</th>", html_escape(&c.name));
                    }
                    o.push_str("</tr></thead><tbody>\n");
                    for row in &t.rows {
                        o.push_str("<tr>");
                        for (c, cell) in t.columns.iter().zip(row) {
                            let class = if c.align == Align::Right { " class=\"r\"" } else { "" };
                            let _ = write!(o, "<td{class}>{}</td>", html_escape(cell));
                        }
                        o.push_str("</tr>\n");
                    }
                    o.push_str("</tbody></table>\n");
                }
                Block::Figure(f) => {
                    let _ = writeln!(o, "<figure class=\"plot\">{}</figure>", plot::svg(f));
                }
                Block::Picture(svg) => {
                    // Past the XML prolog and doctype: an inline <svg> element.
                    let at = svg.find("<svg").unwrap_or(0);
                    let _ = writeln!(o, "<figure class=\"plot\">{}</figure>", &svg[at..]);
                }
            }
        }
        o.push_str("</section>\n");
    }
    o.push_str("</body></html>\n");
    o
}
