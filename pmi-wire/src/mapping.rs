//! `PMI_process_mapping`: which ranks share a node.
//!
//! Servers publish the placement of a job's ranks as the job attribute `PMI_process_mapping`
//! (PMI-1 `get`, PMI-2 `info-getjobattr`), in the form `(vector,(start,count,ppn),…)`: each
//! block puts `ppn` consecutive ranks on each of the nodes `start .. start+count`, blocks are
//! applied in order, and when they run out before every rank is placed they are applied again
//! from the first (MPICH's parser does this "wrap-around"; Hydra 4.0.2 writes four local ranks
//! as `(vector,(0,1,1))`). A bare node id stands for the block `(id,1,1)`; white space is
//! ignored. Repeat groups (`[…]xN`) are not read: no server we know writes them.
//!
//! This module only reads the value; it knows nothing of how the value was obtained. The
//! PMI client libraries derive the "clique" (the ranks on the caller's node) from it.

use thiserror::Error;

/// Why a `PMI_process_mapping` value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MappingError {
    /// The value is empty: the server does not know the placement (RFC 13's convention).
    #[error("the process mapping is empty (unknown placement)")]
    Empty,
    /// The value does not have the `(vector,…)` form.
    #[error("not a vector process mapping: {0:?}")]
    NotVector(String),
    /// A block is not `(start,count,ppn)` of non-negative integers, or a bare node id.
    #[error("bad block {0:?} in the process mapping")]
    BadBlock(String),
    /// Every block is empty (a zero count or ppn), so no rank can be placed.
    #[error("the process mapping places no rank")]
    NoRanks,
}

/// One block: `ppn` ranks on each of `count` nodes, starting at node `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The first node id.
    pub start: u32,
    /// How many consecutive nodes.
    pub count: u32,
    /// Ranks per node.
    pub ppn: u32,
}

/// A parsed `PMI_process_mapping`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessMapping {
    blocks: Vec<Block>,
}

impl ProcessMapping {
    /// Reads a mapping value such as `(vector,(0,2,4))`.
    pub fn parse(value: &str) -> Result<ProcessMapping, MappingError> {
        let s: String = value.chars().filter(|c| !c.is_whitespace()).collect();
        if s.is_empty() {
            return Err(MappingError::Empty);
        }
        let inner = s
            .strip_prefix("(vector,")
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| MappingError::NotVector(value.chars().take(64).collect()))?;
        let mut blocks = Vec::new();
        let mut rest = inner;
        while !rest.is_empty() {
            let (item, tail) = if let Some(r) = rest.strip_prefix('(') {
                let end = r
                    .find(')')
                    .ok_or_else(|| MappingError::BadBlock(rest.chars().take(32).collect()))?;
                (&r[..end], &r[end + 1..])
            } else {
                match rest.find(',') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, ""),
                }
            };
            let nums: Vec<u32> = item
                .split(',')
                .map(|x| x.parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| MappingError::BadBlock(item.chars().take(32).collect()))?;
            blocks.push(match nums[..] {
                [start, count, ppn] => Block { start, count, ppn },
                [id] => Block {
                    start: id,
                    count: 1,
                    ppn: 1,
                },
                _ => return Err(MappingError::BadBlock(item.chars().take(32).collect())),
            });
            rest = match tail.strip_prefix(',') {
                Some(t) => t,
                None if tail.is_empty() => tail,
                None => return Err(MappingError::BadBlock(tail.chars().take(32).collect())),
            };
        }
        if blocks.iter().all(|b| b.count == 0 || b.ppn == 0) {
            return Err(MappingError::NoRanks);
        }
        Ok(ProcessMapping { blocks })
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The node id of each of `size` ranks, applying the blocks cyclically.
    pub fn nodes(&self, size: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(size);
        while out.len() < size {
            for b in &self.blocks {
                for node in b.start..b.start.saturating_add(b.count) {
                    for _ in 0..b.ppn {
                        if out.len() == size {
                            return out;
                        }
                        out.push(node);
                    }
                }
            }
        }
        out
    }

    /// The ranks (of a job of `size`) on the same node as `rank`, ascending; `rank` included.
    /// Empty when `rank` is not below `size`.
    pub fn clique(&self, rank: usize, size: usize) -> Vec<usize> {
        let nodes = self.nodes(size);
        let Some(&mine) = nodes.get(rank) else {
            return Vec::new();
        };
        nodes
            .iter()
            .enumerate()
            .filter(|(_, &n)| n == mine)
            .map(|(r, _)| r)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(m: &str, size: usize) -> Vec<u32> {
        ProcessMapping::parse(m).unwrap().nodes(size)
    }

    #[test]
    fn blocks_and_wrap_around() {
        assert_eq!(nodes("(vector,(0,1,1))", 4), [0, 0, 0, 0]);
        assert_eq!(nodes("(vector,(0,1,4))", 4), [0, 0, 0, 0]);
        assert_eq!(nodes("(vector,(0,2,2))", 4), [0, 0, 1, 1]);
        assert_eq!(nodes("(vector,(0,2,1))", 5), [0, 1, 0, 1, 0]);
        assert_eq!(nodes("(vector, (0,2,2), (2,1,1))", 5), [0, 0, 1, 1, 2]);
        assert_eq!(nodes("(vector,(0,1,2),(1,1,1))", 3), [0, 0, 1]);
        assert_eq!(nodes("(vector,3,(0,1,1))", 3), [3, 0, 3]);
        assert_eq!(nodes("(vector,(0,2,0),(1,1,2))", 3), [1, 1, 1]);
        assert_eq!(nodes("(vector,(0,1,1))", 0), Vec::<u32>::new());
    }

    #[test]
    fn cliques() {
        let m = ProcessMapping::parse("(vector,(0,2,2))").unwrap();
        assert_eq!(m.clique(0, 4), [0, 1]);
        assert_eq!(m.clique(3, 4), [2, 3]);
        assert_eq!(m.clique(4, 4), Vec::<usize>::new());
        let m = ProcessMapping::parse("(vector,(0,2,1))").unwrap();
        assert_eq!(m.clique(1, 4), [1, 3]);
        let m = ProcessMapping::parse("(vector,(0,1,1))").unwrap();
        assert_eq!(m.clique(2, 3), [0, 1, 2]);
    }

    #[test]
    fn bad_values() {
        use MappingError::*;
        let err = |m| ProcessMapping::parse(m).unwrap_err();
        assert_eq!(err(""), Empty);
        assert_eq!(err("  "), Empty);
        assert!(matches!(err("(0,1,1)"), NotVector(_)));
        assert!(matches!(err("(vector,(0,1))"), BadBlock(_)));
        assert!(matches!(err("(vector,(0,1,x))"), BadBlock(_)));
        assert!(matches!(err("(vector,[(0,1,1)]x2)"), BadBlock(_)));
        assert!(matches!(err("(vector,(0,1,1)"), NotVector(_) | BadBlock(_)));
        assert!(matches!(err("(vector,(0,1,1)x)"), BadBlock(_)));
        assert_eq!(err("(vector,(0,0,4))"), NoRanks);
        assert!(matches!(
            err("(vector,)"),
            NotVector(_) | BadBlock(_) | NoRanks
        ));
    }
}
