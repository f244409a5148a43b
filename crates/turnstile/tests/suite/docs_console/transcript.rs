//! The console blocks of a markdown file, read as commands and the output the doc shows
//! (the rules are in the module header, `docs_console/mod.rs`).

use anyhow::ensure;

/// One command of a block, and what the doc shows it printing.
#[derive(Debug, Clone)]
pub struct Step {
    /// Where the command is (file:line), for messages.
    pub at: String,
    pub cmd: String,
    /// Output printed while it runs (before a marker), or all of it (no marker).
    pub output: Vec<String>,
    /// True if a marker says it keeps running while the next commands run.
    pub running: bool,
    /// Its final output, after the marker (or in a later output-only block).
    pub final_output: Vec<String>,
}

/// What a file's console blocks say, in order.
#[derive(Debug)]
pub enum Item {
    Step(Step),
    /// An output-only block: the final output of the last still-running command.
    Output {
        at: String,
        lines: Vec<String>,
    },
}

/// The console blocks of `text`, as steps and output-only blocks.
pub fn console_blocks(file: &str, text: &str) -> anyhow::Result<Vec<(String, Vec<Item>)>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim_end() != "```console" {
            continue;
        }
        let start = format!("{file}:{}", n + 1);
        let mut body = Vec::new();
        for (n, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            body.push((format!("{file}:{}", n + 1), line.to_string()));
        }
        let raw = body
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        blocks.push((raw, parse_block(&start, &body)?));
    }
    Ok(blocks)
}

fn is_marker(line: &str) -> bool {
    let t = line.trim();
    line.starts_with(' ') && t.len() > 6 && t.starts_with("...") && t.ends_with("...")
}

fn parse_block(start: &str, body: &[(String, String)]) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut orphan = Vec::new();
    for (at, line) in body {
        if let Some(cmd) = line.strip_prefix("$ ") {
            items.push(Item::Step(Step {
                at: at.clone(),
                cmd: cmd.to_string(),
                output: Vec::new(),
                running: false,
                final_output: Vec::new(),
            }));
            continue;
        }
        match items.last_mut() {
            Some(Item::Step(step)) if is_marker(line) => {
                ensure!(!step.running, "{at}: a second marker for one command");
                step.running = true;
            }
            Some(Item::Step(step)) if step.running => step.final_output.push(line.clone()),
            Some(Item::Step(step)) => step.output.push(line.clone()),
            _ => orphan.push(line.clone()),
        }
    }
    if !orphan.is_empty() {
        ensure!(items.is_empty(), "{start}: output before the first command");
        items.push(Item::Output {
            at: start.to_string(),
            lines: orphan,
        });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsing: markers, final output, output-only blocks.
    #[test]
    fn console_blocks_are_read_as_documented() -> anyhow::Result<()> {
        let text = "x\n```console\n$ a\n1\n    ... blocks ...\n2\n$ b\n```\n```console\n3\n```\n";
        let blocks = console_blocks("f.md", text)?;
        assert_eq!(blocks.len(), 2);
        match &blocks[0].1[..] {
            [Item::Step(a), Item::Step(b)] => {
                assert!(a.running && a.output == ["1"] && a.final_output == ["2"]);
                assert!(!b.running && b.output.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&blocks[1].1[..], [Item::Output { lines, .. }] if lines == &["3"]));
        Ok(())
    }
}
