//! Two engines joined by a perfect in-memory wire, for data-path tests. A
//! test may drop or duplicate chosen packets with a filter; time advances
//! to the next timer whenever the wire is idle.

use super::*;
use softverbs_wire::{Flow, PacketView};
use std::net::Ipv4Addr;

pub const MEM_BASE: u64 = 0x1000_0000;
pub const MEM_LEN: usize = 1 << 20;

pub struct Node {
    pub e: Engine,
    pub mem: FlatMemory,
    pub gid: Gid,
    pub pd: PdId,
    pub cq: CqId,
    pub key: u32,
}

impl Node {
    fn new(host: u8, qpn_base: u32, tune: &dyn Fn(&mut DeviceConfig)) -> Node {
        let mut cfg = DeviceConfig::loopback(u64::from(host));
        cfg.ports[0].gids = vec![Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, host))];
        cfg.qpn_base = qpn_base;
        tune(&mut cfg);
        let mut e = Engine::new(cfg);
        let pd = e.alloc_pd().unwrap();
        let (cq, _) = e.create_cq(4096, 0).unwrap();
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let key = e
            .reg_mr(pd, MEM_BASE, MEM_LEN as u64, MEM_BASE, all.bits())
            .unwrap()
            .key;
        Node {
            e,
            mem: FlatMemory::new(MEM_BASE, MEM_LEN),
            gid: Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, host)),
            pd,
            cq,
            key,
        }
    }

    pub fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            addr: MEM_BASE + offset,
            length,
            lkey: self.key,
        }
    }

    /// Posts a receive WR of `len` bytes at `offset` in its memory.
    pub fn post_recv(&mut self, qp: QpId, wr_id: u64, offset: u64, len: u32) {
        let sge = [self.sge(offset, len)];
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        self.e.post_recv(qp, &wr).unwrap();
    }

    pub fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.e.poll_cq(self.cq, 4096, &mut out).unwrap();
        out
    }

    pub fn events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.e.poll_event()).collect()
    }
}

/// What a filter decides for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
    /// Delivered marked, as by a receiver whose queue fills
    /// (`Arrival::marked`).
    Mark,
}

pub type Filter = Box<dyn FnMut(bool, &PacketView<'_>) -> Fate>;

pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub now: Nanos,
    pub filter: Filter,
    /// QPs use the same-host path: whole operations executed against the
    /// peer engine, no packets.
    pub same_host: bool,
    /// UD datagrams are answered `Wire` (their destination not reachable
    /// directly): they go out as packets.
    pub ud_via_wire: bool,
    /// A hook run before each same-host operation executes; false drops
    /// it (the target's process is gone).
    pub reachable: Box<dyn FnMut(bool) -> bool>,
    /// Each side sends one packet a round, as two hosts send at once (by
    /// default each sends all it has before the other's turn).
    pub interleaved: bool,
    /// The traffic class of every packet sent, with whether a sent it.
    pub classes: Vec<(bool, u8)>,
}

/// Per-QP settings of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub rd_atomic: u8,
    pub access: AccessFlags,
    /// The GRH traffic class of the QP's path.
    pub traffic_class: u8,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            mtu: Mtu::Mtu1024,
            psn_a: 100,
            psn_b: 200,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 4,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            traffic_class: 0,
        }
    }
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with_window(DeviceConfig::DEFAULT_SEND_WINDOW)
    }

    /// A pair whose devices have a send window of `bytes`
    /// (`DeviceConfig::send_window_bytes`).
    pub fn with_window(bytes: u32) -> Pair {
        Pair::with_costed_window(bytes, PacketCost::PAYLOAD)
    }

    /// A pair whose devices have a send window of `bytes` in which a
    /// packet counts `cost` (`DeviceConfig::packet_cost`).
    pub fn with_costed_window(bytes: u32, cost: PacketCost) -> Pair {
        Pair::with_config(|cfg| {
            cfg.send_window_bytes = bytes;
            cfg.packet_cost = cost;
        })
    }

    /// A pair whose devices' configuration `tune` changed.
    pub fn with_config(tune: impl Fn(&mut DeviceConfig)) -> Pair {
        Pair {
            a: Node::new(1, 0x100, &tune),
            b: Node::new(2, 0x200, &tune),
            now: 0,
            filter: Box::new(|_, _| Fate::Deliver),
            same_host: false,
            reachable: Box::new(|_| true),
            ud_via_wire: false,
            interleaved: false,
            classes: Vec::new(),
        }
    }

    /// A pair on one host (see `same_host`).
    pub fn same_host() -> Pair {
        Pair {
            same_host: true,
            ..Pair::new()
        }
    }

    /// [`Pair::same_host`] or [`Pair::new`], for a test run on both paths.
    pub fn on(same_host: bool) -> Pair {
        if same_host {
            Pair::same_host()
        } else {
            Pair::new()
        }
    }

    /// Where a's UD WRs reach b's QP `qb`: an AH for b's GID, and the
    /// Q_Key with the high bit set (the sending QP's own).
    pub fn ud_target(&mut self, qb: QpId) -> UdTarget {
        let av = AhAttr {
            grh: GlobalRoute {
                dgid: self.b.gid,
                ..av().grh
            },
            ..av()
        };
        UdTarget {
            ah: self.a.e.create_ah(self.a.pd, &av).unwrap(),
            remote_qpn: self.b.e.qp_num(qb).unwrap(),
            remote_qkey: 0x8000_0000,
        }
    }

    /// Creates a QP of `ty` on each node and brings both to RTS, connected
    /// to each other (UD QPs get Q_Key 0x11111111).
    pub fn connect(&mut self, ty: QpType, link: Link) -> (QpId, QpId) {
        let qa = create(&mut self.a, ty, None);
        let qb = create(&mut self.b, ty, None);
        self.bring_up(ty, qa, qb, link);
        (qa, qb)
    }

    pub fn bring_up(&mut self, ty: QpType, qa: QpId, qb: QpId, link: Link) {
        self.bring_up_each(ty, (qa, link), (qb, link));
    }

    /// [`Pair::bring_up`] with each end's own link settings (a's, then
    /// b's, each end's PSNs included): ends that disagree, as a program's
    /// mistake makes them.
    pub fn bring_up_each(&mut self, ty: QpType, a: (QpId, Link), b: (QpId, Link)) {
        let ((qa, link_a), (qb, link_b)) = (a, b);
        let na = self.a.e.qp_num(qa).unwrap();
        let nb = self.b.e.qp_num(qb).unwrap();
        let (ga, gb) = (self.a.gid, self.b.gid);
        // Each end receives from the PSN its link says the other sends.
        let (a_rq, a_sq) = (link_a.psn_b, link_a.psn_a);
        let (b_rq, b_sq) = (link_b.psn_a, link_b.psn_b);
        up(&mut self.a.e, qa, ty, nb, gb, a_rq, a_sq, link_a);
        up(&mut self.b.e, qb, ty, na, ga, b_rq, b_sq, link_b);
        if self.same_host {
            self.a.e.set_direct(qa, true).unwrap();
            self.b.e.set_direct(qb, true).unwrap();
        }
    }

    /// Brings node b's QP `qb` (in RESET) up again, connected to `qa`.
    pub fn bring_up_b(&mut self, ty: QpType, qa: QpId, qb: QpId, link: Link) {
        let na = self.a.e.qp_num(qa).unwrap();
        let ga = self.a.gid;
        up(&mut self.b.e, qb, ty, na, ga, link.psn_a, link.psn_b, link);
        if self.same_host {
            self.b.e.set_direct(qb, true).unwrap();
        }
    }

    /// Executes every same-host operation either side hands out; returns
    /// how many.
    fn run_direct(&mut self) -> usize {
        let mut done = 0;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            while let Some(op) = src.e.poll_direct(self.now) {
                let outcome = if op.ud.is_some() && self.ud_via_wire {
                    softverbs_engine::direct::DirectOutcome::Wire
                } else if (self.reachable)(from_a) {
                    let mut target =
                        EngineTarget::new(&mut dst.e, &mut dst.mem, &mut src.mem, op.dest_qpn);
                    softverbs_engine::direct::execute(&op, &mut target)
                } else {
                    softverbs_engine::direct::DirectOutcome::Dropped
                };
                src.e.handle_direct(self.now, &op, outcome, &mut src.mem);
                done += 1;
                self.now += 1_000;
            }
        }
        done
    }

    /// Moves packets and time until both sides are idle, or `budget`
    /// packets have moved. Returns the packets moved. Every packet is
    /// written as the transport has it written, with its ICRC started by
    /// the sink, and must carry a valid ICRC.
    pub fn run(&mut self, budget: usize) -> usize {
        let mut moved = 0;
        while moved < budget {
            let now = self.move_packets();
            moved += now;
            if now == 0 && !self.advance_to_timer() {
                break;
            }
        }
        moved
    }

    /// Moves packets until none is left to send, without letting time
    /// reach any timer. Returns the packets moved.
    pub fn exchange(&mut self) -> usize {
        let mut moved = 0;
        loop {
            match self.move_packets() {
                0 => return moved,
                n => moved += n,
            }
        }
    }

    /// One round: same-host operations, then what each side has to send.
    fn move_packets(&mut self) -> usize {
        let mut sink = SealingSink::default();
        let mut moved = self.run_direct();
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            while let Some(t) = src.e.poll_transmit_to(self.now, &src.mem, &mut sink) {
                moved += 1;
                self.classes.push((from_a, t.traffic_class));
                let pkt = sink.sealed(&t);
                let fate =
                    PacketView::parse(pkt).map_or(Fate::Deliver, |v| (self.filter)(from_a, &v));
                let copies = match fate {
                    Fate::Deliver => 1,
                    Fate::Drop => 0,
                    Fate::Mark => 1,
                    Fate::Duplicate => 2,
                };
                let arrival = Arrival {
                    src_gid: t.src_gid,
                    dst_gid: t.dst_gid,
                    marked: fate == Fate::Mark,
                    traffic_class: t.traffic_class,
                };
                for _ in 0..copies {
                    dst.e.handle_arrival(self.now, arrival, pkt, &mut dst.mem);
                }
                self.now += 1_000;
                if self.interleaved {
                    break;
                }
            }
        }
        moved
    }

    fn advance_to_timer(&mut self) -> bool {
        let next = [self.a.e.poll_timeout(), self.b.e.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(at) = next else {
            return false;
        };
        self.now = self.now.max(at);
        self.a.e.handle_timeout(self.now);
        self.b.e.handle_timeout(self.now);
        true
    }
}

pub fn create(n: &mut Node, ty: QpType, srq: Option<SrqId>) -> QpId {
    let init = QpInitAttr {
        send_cq: n.cq,
        recv_cq: n.cq,
        srq,
        cap: QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        },
        qp_type: ty as u32,
        sq_sig_all: false,
    };
    n.e.create_qp(n.pd, &init).unwrap().id
}

#[allow(clippy::too_many_arguments)]
fn up(
    e: &mut Engine,
    qp: QpId,
    ty: QpType,
    remote: u32,
    dgid: Gid,
    rq_psn: u32,
    sq_psn: u32,
    link: Link,
) {
    let (a, m) = init_step(ty);
    let a = QpAttr {
        qp_access_flags: link.access.bits(),
        ..a
    };
    e.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rtr_step(ty);
    let mut av = a.ah_attr;
    av.grh.dgid = dgid;
    av.grh.traffic_class = link.traffic_class;
    let a = QpAttr {
        path_mtu: link.mtu as u32,
        dest_qp_num: remote,
        rq_psn,
        max_dest_rd_atomic: link.rd_atomic,
        min_rnr_timer: link.min_rnr_timer,
        ah_attr: av,
        ..a
    };
    e.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rts_step(ty);
    let a = QpAttr {
        sq_psn,
        timeout: link.timeout,
        retry_cnt: link.retry_cnt,
        rnr_retry: link.rnr_retry,
        max_rd_atomic: link.rd_atomic,
        ..a
    };
    e.modify_qp(qp, &a, m).unwrap();
}

/// A send WR with the usual defaults.
pub fn wr(wr_id: u64, opcode: u32, sges: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        opcode,
        send_flags: send_flags::SIGNALED,
        sg_list: sges,
        inline_data: &[],
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget::default(),
        atomic: AtomicTarget::default(),
        ud: None,
    }
}

/// A sink like the transport's send batch, one packet at a time: it
/// starts each packet's ICRC from the IP and UDP headers of its route
/// (IPv4 identification 0) and keeps the last packet committed.
#[derive(Default)]
pub struct SealingSink {
    buf: Vec<u8>,
    icrc: Option<softverbs_wire::Icrc>,
    flow: Option<Flow>,
    committed: bool,
}

impl PacketSink for SealingSink {
    fn reserve(&mut self, route: &Route, len: usize) -> Reservation<'_> {
        let port = |gid: Gid| std::net::SocketAddr::new(gid.to_ip(), 4791);
        let flow = Flow::from_sockets(port(route.src_gid), port(route.dst_gid)).unwrap();
        self.icrc = Some(flow.icrc_start(len, 0).unwrap());
        self.flow = Some(flow);
        self.committed = false;
        self.buf.clear();
        self.buf.resize(len, 0xA5);
        Reservation {
            buf: &mut self.buf,
            icrc: self.icrc.as_mut(),
        }
    }

    fn commit(&mut self) {
        self.committed = true;
    }
}

impl SealingSink {
    /// The packet `t` says was sent: committed, as long as said, with a
    /// valid ICRC.
    pub fn sealed(&self, t: &Transmit) -> &[u8] {
        assert!(self.committed, "a packet returned but not committed");
        assert_eq!(self.buf.len(), t.len);
        let flow = self.flow.as_ref().unwrap();
        flow.verify(&self.buf)
            .unwrap_or_else(|e| panic!("packet {:02x?}: {e}", &self.buf[..12]));
        &self.buf
    }
}
