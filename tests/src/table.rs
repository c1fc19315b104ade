//! The QP state transition table of docs/conformance.md, parsed from the
//! block between the `transition-table` markers. Each row names a QP type,
//! a from-state (`any` = every state), a to-state and the required and
//! optional `IBV_QP_*` bits (`—` = none). Only the marked block is read, so
//! the rest of the document can change freely.

use crate::names::{state_from_name, type_from_name, STATES};
use softverbs_engine::{QpAttrMask, QpState, QpType};

/// Where the table lives.
pub const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/conformance.md");

/// The document itself, built in, so that programs outside the source
/// tree (`softverbs conformance`) follow the same table.
const DOC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/conformance.md"
));

const BEGIN: &str = "<!-- transition-table:begin -->";
const END: &str = "<!-- transition-table:end -->";

/// What one legal transition asks of the attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Bits that must be present besides IBV_QP_STATE.
    pub required: QpAttrMask,
    /// Bits that may be present.
    pub optional: QpAttrMask,
}

impl Rule {
    /// Every bit a mask may carry for this transition.
    pub fn allowed(&self) -> QpAttrMask {
        self.required | self.optional | QpAttrMask::STATE
    }
}

/// One legal transition, with `any` expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// QP type.
    pub ty: QpType,
    /// State before.
    pub from: QpState,
    /// State after.
    pub to: QpState,
    /// Its mask rule.
    pub rule: Rule,
}

/// Every legal transition; whatever is not listed is illegal (EINVAL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionTable {
    rows: Vec<Row>,
}

impl TransitionTable {
    /// Parses the table of docs/conformance.md (built in); panics with the
    /// reason when the table is malformed, since every test depends on it.
    pub fn load() -> TransitionTable {
        TransitionTable::parse(DOC).unwrap_or_else(|e| panic!("{DOC_PATH}: {e}"))
    }

    /// Parses the marked block of a Markdown document.
    pub fn parse(markdown: &str) -> Result<TransitionTable, String> {
        let start = markdown
            .find(BEGIN)
            .ok_or("no transition-table:begin marker")?;
        let block = &markdown[start + BEGIN.len()..];
        let end = block.find(END).ok_or("no transition-table:end marker")?;
        let mut rows: Vec<Row> = Vec::new();
        for line in block[..end]
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            for row in parse_line(line)? {
                if rows
                    .iter()
                    .any(|r| (r.ty, r.from, r.to) == (row.ty, row.from, row.to))
                {
                    return Err(format!("transition listed twice: {line}"));
                }
                rows.push(row);
            }
        }
        rows.sort_by_key(|r| (r.ty as u32, r.from, r.to));
        Ok(TransitionTable { rows })
    }

    /// The rule of a transition, `None` when it is illegal.
    pub fn rule(&self, ty: QpType, from: QpState, to: QpState) -> Option<Rule> {
        self.rows
            .iter()
            .find(|r| (r.ty, r.from, r.to) == (ty, from, to))
            .map(|r| r.rule)
    }

    /// Every row, ordered by type, from and to.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The states a QP of type `ty` in `from` may move to.
    pub fn targets(&self, ty: QpType, from: QpState) -> Vec<QpState> {
        let rows = self.rows.iter().filter(|r| r.ty == ty && r.from == from);
        rows.map(|r| r.to).collect()
    }
}

/// One table line: nothing for the header and separator, else its rows.
fn parse_line(line: &str) -> Result<Vec<Row>, String> {
    let inner = line
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
        .ok_or_else(|| format!("not a table row: {line}"))?;
    let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
    let [ty, from, to, required, optional, _source] = cells[..] else {
        return Err(format!("expected 6 cells: {line}"));
    };
    if ty == "type" || ty.starts_with("---") {
        return Ok(Vec::new());
    }
    let ty = type_from_name(ty).ok_or_else(|| format!("unknown QP type in: {line}"))?;
    let to = state_from_name(to).ok_or_else(|| format!("unknown to-state in: {line}"))?;
    let froms = match from {
        "any" => STATES.to_vec(),
        "any but RESET" => STATES[1..].to_vec(),
        name => {
            vec![state_from_name(name).ok_or_else(|| format!("unknown from-state in: {line}"))?]
        }
    };
    let rule = Rule {
        required: parse_bits(required)?,
        optional: parse_bits(optional)?,
    };
    Ok(froms
        .into_iter()
        .map(|from| Row { ty, from, to, rule })
        .collect())
}

/// A comma-separated list of `IBV_QP_*` names, `—` for none. IBV_QP_STATE
/// is implied by every row, so listing it is a mistake in the document.
fn parse_bits(cell: &str) -> Result<QpAttrMask, String> {
    if cell == "—" {
        return Ok(QpAttrMask::empty());
    }
    let mut mask = QpAttrMask::empty();
    for name in cell.split(',').map(str::trim) {
        let bit =
            QpAttrMask::from_bit_name(name).ok_or_else(|| format!("unknown mask bit {name:?}"))?;
        if bit == QpAttrMask::STATE {
            return Err("IBV_QP_STATE is implied and must not be listed".to_string());
        }
        mask |= bit;
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "intro\n<!-- transition-table:begin -->\n\
        | type | from | to | required | optional | source |\n\
        |---|---|---|---|---|---|\n\
        | UD | any | ERR | — | — | x |\n\
        | RC | RESET | INIT | IBV_QP_PORT, IBV_QP_PKEY_INDEX | — | y |\n\
        <!-- transition-table:end -->\n| RC | INIT | RTR | — | — | outside |\n";

    #[test]
    fn parses_rows_and_expands_any() {
        let t = TransitionTable::parse(SAMPLE).unwrap();
        assert_eq!(t.rows().len(), 8);
        let init = t.rule(QpType::Rc, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(init.required, QpAttrMask::PORT | QpAttrMask::PKEY_INDEX);
        assert!(init.optional.is_empty());
        for s in STATES {
            assert!(t.rule(QpType::Ud, s, QpState::Err).is_some());
        }
        assert_eq!(
            t.rule(QpType::Rc, QpState::Init, QpState::Rtr),
            None,
            "outside the markers"
        );
    }

    #[test]
    fn rejects_unknown_names_and_duplicates() {
        let bad_bit = SAMPLE.replace("IBV_QP_PORT,", "IBV_QP_PROT,");
        assert!(TransitionTable::parse(&bad_bit).is_err());
        let dup = SAMPLE.replace(
            "| RC | RESET",
            "| UD | ERR | ERR | — | — | z |\n| RC | RESET",
        );
        assert!(TransitionTable::parse(&dup).is_err());
        assert!(TransitionTable::parse("no markers").is_err());
    }
}
