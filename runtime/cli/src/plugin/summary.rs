//! What `tributary plugin check` prints of a loaded plugin: who it is, what it declared and
//! what it reads.

use std::fmt::Write;

use serde::Serialize;
use tributary::transform::PluginSummary;

use super::landed::type_label;

#[derive(Serialize)]
pub struct Report {
    name: String,
    version: String,
    file: String,
    sha256: String,
    contract: String,
    outputs: Vec<Output>,
    reshapes: Vec<String>,
    reads: Reads,
}

#[derive(Serialize)]
struct Output {
    name: String,
    columns: Vec<Column>,
}

#[derive(Serialize)]
struct Column {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    nullable: bool,
    key: bool,
}

#[derive(Serialize)]
struct Reads {
    /// The column names, `null` for every column.
    columns: Option<Vec<String>>,
    old_images: bool,
    messages: bool,
    whole_transactions: bool,
}

impl Report {
    pub fn of(summary: &PluginSummary) -> Report {
        Report {
            name: summary.info.name.clone(),
            version: summary.info.version.clone(),
            file: summary.info.path.clone(),
            sha256: summary.info.digest.clone(),
            contract: summary.contract.clone(),
            outputs: summary
                .outputs
                .iter()
                .map(|(name, columns)| Output {
                    name: name.clone(),
                    columns: columns
                        .iter()
                        .map(|c| Column {
                            name: c.name.clone(),
                            ty: type_label(c),
                            nullable: c.nullable,
                            key: c.key,
                        })
                        .collect(),
                })
                .collect(),
            reshapes: summary.reshapes.clone(),
            reads: Reads {
                columns: summary.reads_columns.clone(),
                old_images: summary.reads_old_images,
                messages: summary.reads_messages,
                whole_transactions: summary.whole_transactions,
            },
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let columns = match &self.reads.columns {
            None => "all".to_owned(),
            Some(names) if names.is_empty() => "none".to_owned(),
            Some(names) => names.join(", "),
        };
        let mut out = String::new();
        let mut line = |label: &str, value: &str| {
            let _ = writeln!(out, "{label:<20}{value}");
        };
        line("name", &self.name);
        line("version", &self.version);
        line("file", &self.file);
        line("sha256", &self.sha256);
        line("contract", &self.contract);
        line("reads columns", &columns);
        line("reads old images", yes_no(self.reads.old_images));
        line("reads messages", yes_no(self.reads.messages));
        line(
            "whole transactions",
            match self.reads.whole_transactions {
                true => "yes (large transactions are held in memory whole)",
                false => "no (large transactions may arrive in parts)",
            },
        );
        match self.reshapes.as_slice() {
            [] => line("reshapes", "none"),
            [first, rest @ ..] => {
                line("reshapes", first);
                for reshape in rest {
                    line("", reshape);
                }
            }
        }
        if self.outputs.is_empty() {
            line(
                "outputs",
                "none declared (rows land in their tables' outputs)",
            );
        }
        for output in &self.outputs {
            let count = output.columns.len();
            let _ = writeln!(
                out,
                "output {} ({count} column{})",
                output.name,
                if count == 1 { "" } else { "s" }
            );
            let name_width = output
                .columns
                .iter()
                .map(|c| c.name.len())
                .max()
                .unwrap_or(0);
            let type_width = output.columns.iter().map(|c| c.ty.len()).max().unwrap_or(0);
            for column in &output.columns {
                let mut flags = Vec::new();
                if !column.nullable {
                    flags.push("not null");
                }
                if column.key {
                    flags.push("key");
                }
                let line = format!(
                    "  {:<name_width$}  {:<type_width$}  {}",
                    column.name,
                    column.ty,
                    flags.join(", ")
                );
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
        out
    }
}
