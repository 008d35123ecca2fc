//! {{name}}: a Tributary transform plugin.
//!
//! As written by `tributary plugin new`, it lands every change as it came: it reads no values
//! (the host then copies none into it), takes no settings and keeps each change. The contract
//! is `tributary-guest/wit/transform.wit`; its comments say what every call and field means.

use tributary_guest::*;

struct Plugin;

impl Transform for Plugin {
    fn describe() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        // Settings come from the `config = { ... }` of the plugin's `[[transform]]`; read them
        // with `setting(&config, "key")` and refuse what you do not know.
        no_settings(&config)?;
        // Name the columns you read (`reads_columns(&["email"])`); the others arrive as
        // `Value::Absent`. Declare outputs of your own with `.output(name, columns)`.
        Ok(Setup::new().reads_columns(&[]).without_old_images())
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        // Edit here: decide what lands for each change. `c.keep()` lands it as it came;
        // `c.edit(values, old)` replaces some values; `c.to_declared(output, sub, values)`
        // writes a row to an output declared in `init`; `c.reject(class, message)` makes a
        // rejection, for `Processed::rejections`, of a change the plugin cannot handle.
        Ok(batch.changes().map(|c| c.keep()).collect())
    }
}

export_transform!(Plugin);

#[cfg(test)]
mod tests {
    use tributary_guest::testing::{Sample, run};
    use tributary_guest::*;

    use super::Plugin;

    #[test]
    fn keeps_every_change_as_it_came() {
        let text = |s: &str| Value::Text(s.to_owned());
        let batch = Sample::new()
            .table("public.users", &[("id", "int4"), ("email", "text")])
            .insert("public.users", vec![Value::Int4(1), text("ann@example.com")])
            .update(
                "public.users",
                None,
                vec![Value::Int4(1), text("ann@example.net")],
            )
            .commit()
            .delete("public.users", vec![Value::Int4(1), Value::Null])
            .build();
        let landed = run::<Plugin>(&[], batch).unwrap();
        assert!(landed.rejections.is_empty());
        let rows: Vec<(Op, &[Value])> = landed
            .rows
            .iter()
            .map(|r| (r.op, r.values.as_slice()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (Op::Insert, &[Value::Int4(1), text("ann@example.com")][..]),
                (Op::Update, &[Value::Int4(1), text("ann@example.net")][..]),
                (Op::Delete, &[Value::Int4(1), Value::Null][..]),
            ]
        );
        assert!(landed.rows.iter().all(|r| r.output == "public.users"));
    }

    #[test]
    fn refuses_settings() {
        let error = run::<Plugin>(&[("colour", "blue")], Sample::new().build()).unwrap_err();
        assert!(error.contains("colour"), "{error}");
    }
}
