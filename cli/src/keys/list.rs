//! `kura keys list`: key IDs, creation times, key checks, and which key is active.

use std::path::Path;

use super::file;

pub fn run(path: &Path, json: bool) -> anyhow::Result<()> {
    let loaded = file::load(path)?;
    let active = loaded.keyring.active().id;
    let rows: Vec<_> = loaded
        .keyring
        .entries()
        .map(|e| {
            (
                e.id.to_string(),
                e.created.clone(),
                hex::encode(e.key_check()),
                e.id == active,
            )
        })
        .collect();
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(id, created, check, is_active)| {
                serde_json::json!({ "id": id, "created": created, "key_check": check, "active": is_active })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        println!(
            "{:<16}  {:<6}  {:<25}  KEY CHECK",
            "ID", "ACTIVE", "CREATED"
        );
        for (id, created, check, is_active) in rows {
            println!(
                "{id:<16}  {:<6}  {created:<25}  {check}",
                if is_active { "yes" } else { "" }
            );
        }
    }
    Ok(())
}
