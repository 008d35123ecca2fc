//! Environment references in a pipeline file: `${NAME}` anywhere in a string value is replaced
//! by the variable's value, so a secret (a password in `source.url`, an S3 key in
//! `sink.options`) stays out of the file. `$$` is a literal `$`; any other `$` is left as it
//! is. An unset variable is an error that names it and the key.

/// Replaces the references in every string of `value`, naming keys as `source.url`,
/// `transform[0].config.token`.
pub fn expand_value(
    value: &mut toml::Value,
    key: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    match value {
        toml::Value::String(text) if text.contains('$') => {
            *text = expand(text, key, var)?;
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                expand_value(item, &format!("{key}[{i}]"), var)?;
            }
        }
        toml::Value::Table(table) => {
            for (name, item) in table.iter_mut() {
                let path = if key.is_empty() {
                    name.clone()
                } else {
                    format!("{key}.{name}")
                };
                expand_value(item, &path, var)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// One string's references.
pub fn expand(
    text: &str,
    key: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or_else(|| {
                format!("{key}: `${{` has no closing `}}`; write ${{NAME}}, or $$ for a literal $")
            })?;
            let name = &tail[..end];
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(format!(
                    "{key}: ${{{name}}} is not an environment variable name (letters, digits and _); write $$ for a literal $"
                ));
            }
            let value = var(name).ok_or_else(|| {
                format!(
                    "{key} refers to the environment variable {name}, which is not set; set it, or write $${{ for a literal ${{"
                )
            })?;
            out.push_str(&value);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "DB_PASSWORD" => Some("s3cr$t".into()),
            "HOST" => Some("db.example".into()),
            _ => None,
        }
    }

    #[test]
    fn references_are_replaced_and_dollars_escaped() {
        assert_eq!(
            expand(
                "postgres://cdc:${DB_PASSWORD}@${HOST}/shop",
                "source.url",
                &env
            )
            .unwrap(),
            "postgres://cdc:s3cr$t@db.example/shop"
        );
        assert_eq!(
            expand("cost $$5 and $HOME", "k", &env).unwrap(),
            "cost $5 and $HOME"
        );
        assert_eq!(expand("$${HOST}", "k", &env).unwrap(), "${HOST}");
        assert_eq!(expand("no references", "k", &env).unwrap(), "no references");
    }

    #[test]
    fn an_unset_variable_names_itself_and_the_key() {
        assert_eq!(
            expand("x${NOPE}y", "sink.options.aws_secret_access_key", &env).unwrap_err(),
            "sink.options.aws_secret_access_key refers to the environment variable NOPE, which is not set; set it, or write $${ for a literal ${"
        );
        assert!(
            expand("${HOST", "k", &env)
                .unwrap_err()
                .contains("no closing")
        );
        assert!(
            expand("${A-B}", "k", &env)
                .unwrap_err()
                .contains("not an environment variable name")
        );
    }

    #[test]
    fn every_string_of_a_file_is_expanded_with_its_key_named() {
        let mut value: toml::Value = toml::from_str(
            "[source]\nurl = \"postgres://u:${DB_PASSWORD}@h/db\"\ntables = [\"a\", \"${NOPE}\"]\n",
        )
        .unwrap();
        let error = expand_value(&mut value, "", &env).unwrap_err();
        assert!(
            error.starts_with("source.tables[1] refers to the environment variable NOPE"),
            "{error}"
        );
        let mut value: toml::Value =
            toml::from_str("[source]\nurl = \"postgres://u:${DB_PASSWORD}@h/db\"\n").unwrap();
        expand_value(&mut value, "", &env).unwrap();
        assert_eq!(
            value["source"]["url"].as_str(),
            Some("postgres://u:s3cr$t@h/db")
        );
    }
}
