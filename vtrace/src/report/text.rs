//! Text for a terminal: every section's lines and tables, in order.

use std::fmt::Write as _;

use super::model::{Align, Block, Column, Section};

pub fn render(sections: &[Section]) -> String {
    let mut o = String::new();
    for block in sections.iter().flat_map(|s| &s.blocks) {
        match block {
            Block::Lines(lines) => {
                for l in lines {
                    o.push_str(l);
                    o.push('\n');
                }
            }
            // A terminal shows the tables the figures are drawn from.
            Block::Figure(_) | Block::Picture(_) => {}
            Block::Table(t) => {
                if let Some(title) = &t.title {
                    let _ = writeln!(o, "\n{title}");
                }
                let header: Vec<String> = t.columns.iter().map(|c| c.name.to_string()).collect();
                row(&mut o, &t.columns, &header);
                for cells in &t.rows {
                    row(&mut o, &t.columns, cells);
                }
            }
        }
    }
    o
}

fn row(o: &mut String, columns: &[Column], cells: &[String]) {
    o.push_str("  ");
    let last = columns.len().min(cells.len()).saturating_sub(1);
    for (i, (c, cell)) in columns.iter().zip(cells).enumerate() {
        o.extend(std::iter::repeat_n(' ', c.gap));
        let _ = match c.align {
            Align::Left => write!(o, "{cell:<w$}", w = c.width),
            Align::Right => write!(o, "{cell:>w$}", w = c.width),
        };
        // A left cell wider than its column still ends in a space: names
        // never run into the next column ("firecrackervcpu").
        if c.align == Align::Left && i < last && cell.chars().count() >= c.width && c.width > 0 {
            o.push(' ');
        }
    }
    o.push('\n');
}
