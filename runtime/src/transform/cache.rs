//! The compile cache: plugins compiled to machine code, kept across starts so that a start
//! after the first loads a plugin in milliseconds instead of compiling it again (tens of
//! seconds for a Python or JavaScript plugin).
//!
//! Every new build of a plugin is a new entry (the key is the file's digest), and a Python
//! plugin's entry takes 35 MiB or more, so the cache is bounded: after each new entry the
//! entries used least recently go until the whole fits `TRIBUTARY_PLUGIN_CACHE_MIB` (1024 by
//! default). A hit marks its entry used (its modification time).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The bound when `TRIBUTARY_PLUGIN_CACHE_MIB` does not set one.
pub const DEFAULT_CAP_MIB: u64 = 1024;
const EXTENSION: &str = "cwasm";

/// Where compiled plugins are kept: `TRIBUTARY_PLUGIN_CACHE`, else
/// `$XDG_CACHE_HOME/tributary/plugins`, else `~/.cache/tributary/plugins`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TRIBUTARY_PLUGIN_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tributary").join("plugins"))
}

/// One compiled plugin in the cache.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    pub path: PathBuf,
    pub bytes: u64,
    /// When it was written or last loaded.
    pub used: SystemTime,
}

/// The cache directory and its bound.
#[derive(Debug, Clone)]
pub struct PluginCache {
    dir: PathBuf,
    cap: u64,
}

impl PluginCache {
    /// The cache of this user, bounded by `TRIBUTARY_PLUGIN_CACHE_MIB`; `None` without a home
    /// directory.
    pub fn open() -> Option<PluginCache> {
        let cap_mib = std::env::var("TRIBUTARY_PLUGIN_CACHE_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_CAP_MIB);
        Some(PluginCache::new(cache_dir()?, cap_mib << 20))
    }

    pub fn new(dir: PathBuf, cap: u64) -> PluginCache {
        PluginCache { dir, cap }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound, in bytes.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The file an entry with this key lives in.
    pub fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    /// Every entry, the most recently used first; an absent directory is an empty cache.
    pub fn entries(&self) -> std::io::Result<Vec<CacheEntry>> {
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::new();
        for item in listing {
            let item = item?;
            let path = item.path();
            if path.extension().is_none_or(|e| e != EXTENSION) {
                continue;
            }
            // Another process may have evicted it meanwhile.
            let Ok(metadata) = item.metadata() else {
                continue;
            };
            entries.push(CacheEntry {
                path,
                bytes: metadata.len(),
                used: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        entries.sort_by(|a, b| b.used.cmp(&a.used).then_with(|| a.path.cmp(&b.path)));
        Ok(entries)
    }

    /// Marks an entry used now, so that eviction takes others first.
    pub fn touch(&self, path: &Path) {
        if let Ok(file) = std::fs::File::options().append(true).open(path) {
            let _ = file.set_modified(SystemTime::now());
        }
    }

    /// Removes the entries used least recently until the cache fits its bound, never `keep`
    /// (the entry just written or loaded); returns what went.
    pub fn evict(&self, keep: &Path) -> std::io::Result<Vec<CacheEntry>> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        let mut removed = Vec::new();
        for entry in entries.into_iter().rev() {
            if total <= self.cap {
                break;
            }
            if entry.path == keep {
                continue;
            }
            match std::fs::remove_file(&entry.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            total -= entry.bytes;
            removed.push(entry);
        }
        Ok(removed)
    }

    /// Removes every entry; returns how many and their bytes.
    pub fn clear(&self) -> std::io::Result<(usize, u64)> {
        let entries = self.entries()?;
        let bytes = entries.iter().map(|e| e.bytes).sum();
        for entry in &entries {
            match std::fs::remove_file(&entry.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok((entries.len(), bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn write(cache: &PluginCache, key: &str, bytes: usize, age_secs: u64) -> PathBuf {
        let path = cache.entry(key);
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let file = std::fs::File::options().append(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age_secs))
            .unwrap();
        path
    }

    #[test]
    fn the_least_recently_used_entries_go_until_the_cache_fits() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PluginCache::new(dir.path().to_owned(), 250);
        let old = write(&cache, "old", 100, 300);
        let used = write(&cache, "used", 100, 200);
        let recent = write(&cache, "recent", 100, 100);
        std::fs::write(dir.path().join("notes.txt"), vec![0u8; 1000]).unwrap();
        // A load marks `old` used: now `used` is the least recent.
        cache.touch(&old);
        let newest = write(&cache, "newest", 100, 0);

        let removed = cache.evict(&newest).unwrap();
        let names: Vec<_> = removed.iter().map(|e| e.path.clone()).collect();
        assert_eq!(names, [used.clone(), recent.clone()]);
        assert!(old.exists() && newest.exists() && !used.exists() && !recent.exists());
        assert!(
            dir.path().join("notes.txt").exists(),
            "only entries are evicted"
        );

        // The entry just written stays even when it alone is over the bound.
        let small = PluginCache::new(dir.path().to_owned(), 10);
        small.evict(&newest).unwrap();
        assert!(newest.exists() && !old.exists());

        assert_eq!(cache.clear().unwrap(), (1, 100));
        assert!(cache.entries().unwrap().is_empty());
        let absent = PluginCache::new(dir.path().join("never"), 10);
        assert!(absent.entries().unwrap().is_empty());
    }
}
