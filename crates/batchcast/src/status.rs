//! Live figures of a running producer, as `batchcast status` shows them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::wire::{
    self, FrameReader, Hello, Role, ToConsumer, ToProducer, MAGIC, PROTOCOL_VERSION,
};

/// A producer's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The producer's name.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Seconds since it started.
    pub uptime_secs: f64,
    /// Slots in the window.
    pub slots: u32,
    /// Lag slots beyond the window (the lag budget, in batches).
    pub lag_slots: u64,
    /// Lag slots holding a batch now (some consumer lags).
    pub lag_slots_used: u64,
    /// What happens past the budget: `wait` or `evict`.
    pub lag_policy: String,
    /// Consumers evicted so far.
    pub evictions: u64,
    /// Bytes per slot (0 before the first batch sized the arena).
    pub slot_size: u64,
    /// Current (or last) epoch.
    pub epoch: u64,
    /// Producer batches published so far.
    pub published: u64,
    /// Producer batches per second over the last few seconds.
    pub batches_per_sec: f64,
    /// Seconds the producer spent blocked on a full window.
    pub blocked_secs: f64,
    /// The nominal batch size, once known.
    pub batch_size: Option<u64>,
    /// Rows per epoch, when known.
    pub samples_per_epoch: Option<u64>,
    /// What the producer says about its stream.
    pub stream: crate::stream::StreamSpec,
    /// One entry per connected consumer (some left out when they would not
    /// fit in one frame; see `omitted_consumers`).
    pub consumers: Vec<ConsumerStatus>,
    /// Consumers left out of `consumers` so that the reply fits a frame.
    pub omitted_consumers: u64,
}

impl StatusReport {
    /// Encodes the reply to a status query, leaving consumers out (and
    /// counting them) until it fits in one frame.
    pub(crate) fn into_frame(self) -> Result<Vec<u8>> {
        let mut msg = ToConsumer::Status(self);
        loop {
            let err = match wire::encode(&msg) {
                Ok(frame) => return Ok(frame),
                Err(e) => e,
            };
            let ToConsumer::Status(report) = &mut msg else {
                return Err(err);
            };
            let n = report.consumers.len();
            if n == 0 {
                return Err(err);
            }
            report.consumers.truncate(n / 2);
            report.omitted_consumers += (n - n / 2) as u64;
        }
    }
}

/// One consumer's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerStatus {
    /// Id given at join.
    pub id: u64,
    /// Its pid (from the socket's peer credentials); 0 when unknown (a
    /// consumer in another pid namespace).
    pub pid: u32,
    /// What it called itself.
    pub label: String,
    /// Its batch size (`None`: the producer's).
    pub batch_size: Option<u64>,
    /// Its join policy.
    pub join: String,
    /// `following`, `waiting` (for the next epoch), `pending` (no arena
    /// yet) or `evicted` (fell behind; gets no more batches).
    pub state: String,
    /// Sequence number of the newest batch sent to it.
    pub position: Option<u64>,
    /// Producer batches it holds (sent, not yet released).
    pub lag: u64,
    /// Batches it is behind the most advanced consumer (evicted past the
    /// budget under the `evict` policy).
    pub behind: u64,
    /// Times it was evicted.
    pub evictions: u64,
    /// Consumer batches it has handed to user code.
    pub delivered: u64,
    /// Seconds it has spent waiting for data.
    pub wait_secs: f64,
}

/// Asks the producer of `endpoint` for its figures.
pub fn query(endpoint: &Endpoint, timeout: Duration) -> Result<StatusReport> {
    let sock = endpoint.connect()?.ok_or_else(|| Error::ProducerNotFound {
        name: endpoint.name().to_owned(),
        socket: endpoint.socket_path(),
        waited_secs: None,
    })?;
    sock.set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("cannot set a socket timeout", e))?;
    let hello = ToProducer::Hello(Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: Role::Status,
    });
    wire::send_frame(&sock, &wire::encode(&hello)?)?;
    let mut reader = FrameReader::new();
    loop {
        if let Some(msg) = reader.next_frame::<ToConsumer>()? {
            return match msg {
                ToConsumer::Status(report) => Ok(report),
                ToConsumer::Refused(reason) => Err(Error::JoinRefused {
                    name: endpoint.name().to_owned(),
                    reason,
                }),
                other => Err(Error::Protocol(format!(
                    "unexpected reply to a status query: {other:?}"
                ))),
            };
        }
        match reader.fill(&sock, true, None)? {
            wire::Fill::Data => {}
            wire::Fill::WouldBlock => {
                return Err(Error::Protocol(format!(
                    "producer {:?} did not answer a status query within {:.1} s",
                    endpoint.name(),
                    timeout.as_secs_f64()
                )))
            }
            wire::Fill::Eof => {
                return Err(Error::ProducerGone {
                    name: endpoint.name().to_owned(),
                    waited_secs: None,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_report_is_cut_to_fit_one_frame() {
        let consumer = |id| ConsumerStatus {
            id,
            pid: 1,
            label: "x".repeat(wire::MAX_LABEL_LEN),
            batch_size: None,
            join: "now".into(),
            state: "following".into(),
            position: None,
            lag: 0,
            behind: 0,
            evictions: 0,
            delivered: 0,
            wait_secs: 0.0,
        };
        let report = StatusReport {
            name: "big".into(),
            pid: 1,
            uptime_secs: 0.0,
            slots: 1,
            lag_slots: 0,
            lag_slots_used: 0,
            lag_policy: "wait".into(),
            evictions: 0,
            slot_size: 0,
            epoch: 0,
            published: 0,
            batches_per_sec: 0.0,
            blocked_secs: 0.0,
            batch_size: None,
            samples_per_epoch: None,
            stream: crate::stream::StreamSpec::default(),
            consumers: (0..20_000).map(consumer).collect(),
            omitted_consumers: 0,
        };
        let frame = report.into_frame().unwrap();
        assert!(frame.len() <= 4 + wire::MAX_FRAME);
        let mut reader = FrameReader::new();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || wire::send_frame(&a, &frame).unwrap());
        let got = loop {
            if let Some(m) = reader.next_frame::<ToConsumer>().unwrap() {
                break m;
            }
            reader.fill(&b, true, None).unwrap();
        };
        writer.join().unwrap();
        let ToConsumer::Status(got) = got else {
            panic!("{got:?}")
        };
        assert!(!got.consumers.is_empty());
        assert_eq!(got.consumers.len() as u64 + got.omitted_consumers, 20_000);
    }
}
