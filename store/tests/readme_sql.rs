//! docs/stores.md quotes the guarded statements of `store/src/schema.rs` ("Use it in a service",
//! "The SQL, and what each guard prevents"); `schema.rs` stays their one source. Each quoted
//! statement opens with `-- schema::NAME`, then its doc comment as `--` lines, then its text. This
//! proves, statement by statement, that the text is exactly the constant the stores run
//! (whitespace aside) and that the comment is exactly the constant's doc comment in `schema.rs`,
//! and that every guard docs/stores.md must show is there.

use lease_store::schema;

const STORES_MD: &str = include_str!("../../docs/stores.md");
const SCHEMA_RS: &str = include_str!("../src/schema.rs");

/// The statements docs/stores.md may quote, by name.
const STATEMENTS: &[(&str, &str)] = &[
    ("SELECT_JOB", schema::SELECT_JOB),
    ("SELECT_KNOWN", schema::SELECT_KNOWN),
    ("LOCK_LOG", schema::LOCK_LOG),
    ("LOCK_QUEUE", schema::LOCK_QUEUE),
    ("LOCK_LOG_SHARED", schema::LOCK_LOG_SHARED),
    ("SELECT_ACQUIRE_ROWS", schema::SELECT_ACQUIRE_ROWS),
    ("SELECT_HEAD", schema::SELECT_HEAD),
    ("SELECT_EXPIRED", schema::SELECT_EXPIRED),
    ("INSERT_JOB", schema::INSERT_JOB),
    ("UPDATE_JOB", schema::UPDATE_JOB),
    ("SELECT_GRANT", schema::SELECT_GRANT),
    ("UPSERT_GRANT", schema::UPSERT_GRANT),
    ("ENSURE_OP", schema::ENSURE_OP),
    ("SELECT_OP", schema::SELECT_OP),
    ("UPDATE_OP", schema::UPDATE_OP),
    ("NEXT_SEQ", schema::NEXT_SEQ),
    ("INSERT_EVENT", schema::INSERT_EVENT),
    ("INSERT_EVENT_NEXT", schema::INSERT_EVENT_NEXT),
    ("SELECT_CLOCK", schema::SELECT_CLOCK),
];

/// The guards docs/stores.md must show: acquire, the decision write-back (renew, complete, fence),
/// the reclaim listing, the ledger's lookup and apply, and the log's order (SQLite's counter,
/// PostgreSQL's locks).
const REQUIRED: &[&str] = &[
    "SELECT_HEAD",
    "SELECT_JOB",
    "UPDATE_JOB",
    "SELECT_EXPIRED",
    "SELECT_OP",
    "UPDATE_OP",
    "NEXT_SEQ",
    "LOCK_LOG",
    "LOCK_QUEUE",
    "LOCK_LOG_SHARED",
    "SELECT_ACQUIRE_ROWS",
];

/// One quoted statement: its constant's name, its comment and its text, as docs/stores.md has them.
#[derive(Debug)]
struct Quote {
    name: String,
    comment: String,
    sql: String,
}

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// docs/stores.md's section `heading`, up to the next section of the same level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("docs/stores.md has no {heading:?}"));
    let rest = &text[start + 1..];
    let end = rest[heading.len()..].find("\n## ").map_or(rest.len(), |end| end + heading.len());
    &rest[..end]
}

/// Every statement quoted in the section's `sql` blocks.
fn quotes(section: &str) -> Vec<Quote> {
    let mut quotes: Vec<Quote> = Vec::new();
    for block in section.split("```sql\n").skip(1) {
        let block = block.split("```").next().expect("a block");
        let mut current: Option<Quote> = None;
        for line in block.lines().filter(|line| !line.trim().is_empty()) {
            if let Some(name) = line.strip_prefix("-- schema::") {
                assert!(current.is_none(), "a quote without its statement before {line:?}");
                let name = name.split_whitespace().next().expect("a name").to_string();
                current = Some(Quote { name, comment: String::new(), sql: String::new() });
                continue;
            }
            let quote = current.as_mut().unwrap_or_else(|| panic!("{line:?} follows no `-- schema::NAME` line"));
            match line.strip_prefix("--") {
                Some(comment) if quote.sql.is_empty() => quote.comment = format!("{} {comment}", quote.comment),
                Some(_) => panic!("a comment inside the statement {}", quote.name),
                None => quote.sql = format!("{} {line}", quote.sql),
            }
            if line.trim_end().ends_with(';') {
                quotes.extend(current.take());
            }
        }
        assert!(current.is_none(), "a statement without its closing `;`: {current:?}");
    }
    quotes
}

/// The doc comment of `pub const NAME` in `schema.rs`.
fn doc_comment(name: &str) -> String {
    let lines: Vec<&str> = SCHEMA_RS.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.starts_with(&format!("pub const {name}: &str")))
        .unwrap_or_else(|| panic!("schema.rs has no `pub const {name}`"));
    let doc: Vec<&str> = lines[..at].iter().rev().map_while(|line| line.strip_prefix("///")).collect();
    doc.into_iter().rev().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_readmes_sql_is_schema_rs_statement_for_statement_and_comment_for_comment() {
    let quotes = quotes(section(STORES_MD, "## Use it in a service"));
    for quote in &quotes {
        let (_, sql) = STATEMENTS
            .iter()
            .find(|(name, _)| *name == quote.name)
            .unwrap_or_else(|| panic!("docs/stores.md quotes schema::{}, which this test does not know", quote.name));
        let quoted = squeeze(&quote.sql);
        assert_eq!(quoted.strip_suffix(';'), Some(squeeze(sql).as_str()), "schema::{} is quoted wrong", quote.name);
        assert_eq!(
            squeeze(&quote.comment),
            squeeze(&doc_comment(&quote.name)),
            "docs/stores.md's comment on schema::{} is not the one in schema.rs",
            quote.name
        );
    }
    for name in REQUIRED {
        assert!(quotes.iter().any(|quote| quote.name == *name), "docs/stores.md does not quote schema::{name}");
    }
}

#[test]
fn the_statements_this_test_knows_are_schema_rs_constants() {
    for (name, _) in STATEMENTS {
        assert!(!doc_comment(name).trim().is_empty(), "schema::{name} has no doc comment");
    }
}
