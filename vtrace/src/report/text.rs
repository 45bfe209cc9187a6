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
        // A number as wide as its column or wider is parted from the cell
        // before it ("3568.28274482.78" was two run-queue figures).
        if c.align == Align::Right && i > 0 && cell.chars().count() >= c.width && !o.ends_with(' ') {
            o.push(' ');
        }
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

#[cfg(test)]
mod tests {
    use super::super::model::{Table, col, left};
    use super::*;

    #[test]
    fn cells_wider_than_their_column_stay_apart() {
        let mut t = Table::new("t", vec![left("name", 4), col("a", 4), col("b", 4)]);
        t.row(vec!["firecracker".into(), "12345".into(), "67890".into()]);
        t.row(vec!["x".into(), "1".into(), "2".into()]);
        let mut s = Section::new("test", "test");
        s.table(t);
        let text = render(&[s]);
        assert!(text.contains("firecracker 12345 67890"), "{text}");
        assert!(text.contains("  x      1   2"), "{text}");
    }
}
