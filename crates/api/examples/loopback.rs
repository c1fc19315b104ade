//! Two RC QPs of one device connected to each other through its own GID,
//! one receiving through a shared receive queue (SRQ): a SEND (its
//! receive awaited through a completion event, and the SRQ's low
//! watermark event checked), an RDMA WRITE with immediate, an RDMA READ
//! and a fetch-and-add; then a UD datagram between two UD QPs through an
//! address handle; each completion and each byte checked; then every
//! object destroyed. The same code runs on a soft device and on a
//! pass-through one (a real device).
//!
//! Usage: loopback [DEVICE [GID_INDEX]] (softverbs0 and 1 by default);
//! prints "loopback ok on DEVICE (soft|pass-through)" and exits 0, or
//! says what failed and exits 1.

use softverbs_api::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What a step gives, or why it failed.
type Outcome<T> = std::result::Result<T, String>;

/// IBV_MTU_1024.
const MTU_1024: u32 = 3;
/// Bytes of each QP's region.
const LEN: usize = 4096;

/// One QP with its own CQ and registered region.
struct End {
    qp: QpId,
    qp_num: u32,
    cq: CqId,
    region: Region,
    keys: MrKeys,
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "softverbs0".into());
    let gid_index = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    match run(&name, gid_index) {
        Ok(kind) => {
            println!("loopback ok on {name} ({kind})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loopback failed on {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(name: &str, gid_index: u8) -> Outcome<&'static str> {
    let e = |e: Error| e.to_string();
    let dev = open(name).map_err(e)?;
    let gid = dev.query_gid(gid_index.into()).map_err(e)?;
    let pd = dev.alloc_pd().map_err(e)?;
    let srq = shared_queue(&*dev, pd)?;
    let a = end(&*dev, pd, QpType::Rc, None).map_err(e)?;
    let b = end(&*dev, pd, QpType::Rc, Some(srq)).map_err(e)?;
    connect(&*dev, &a, b.qp_num, gid, gid_index).map_err(e)?;
    connect(&*dev, &b, a.qp_num, gid, gid_index).map_err(e)?;
    let attr = dev.query_qp(a.qp).map_err(e)?;
    check(
        attr.qp_state == QpState::Rts as u32,
        "query_qp reads RTS back",
    )?;
    check(attr.dest_qp_num == b.qp_num, "query_qp reads the peer back")?;
    exchange(&*dev, &a, &b, srq)?;
    let c = end(&*dev, pd, QpType::Ud, None).map_err(e)?;
    let d = end(&*dev, pd, QpType::Ud, None).map_err(e)?;
    for ud in [&c, &d] {
        ud_ready(&*dev, ud).map_err(e)?;
    }
    datagram(&*dev, pd, gid, gid_index, &c, &d)?;
    // Everything goes, dependents first: a QP before its CQ and its SRQ,
    // an MR before its PD.
    for end in [a, b, c, d] {
        dev.destroy_qp(end.qp).map_err(e)?;
        dev.destroy_cq(end.cq).map_err(e)?;
        dev.dereg_mr(end.keys.id).map_err(e)?;
    }
    dev.destroy_srq(srq).map_err(e)?;
    dev.dealloc_pd(pd).map_err(e)?;
    Ok(if dev.is_passthrough() {
        "pass-through"
    } else {
        "soft"
    })
}

/// An SRQ of 4 WRs, its low watermark armed at 1 and read back.
fn shared_queue(dev: &dyn Verbs, pd: PdId) -> Outcome<SrqId> {
    let e = |e: Error| e.to_string();
    let asked = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, actual) = dev.create_srq(pd, &asked).map_err(e)?;
    check(
        actual.max_wr >= 4 && actual.max_sge >= 1,
        "create_srq gives at least what was asked",
    )?;
    let armed = SrqAttr {
        srq_limit: 1,
        ..actual
    };
    dev.modify_srq(srq, &armed, SrqAttrMask::LIMIT).map_err(e)?;
    let read = dev.query_srq(srq).map_err(e)?;
    check(read.srq_limit == 1, "query_srq reads the armed limit back")?;
    Ok(srq)
}

fn end(dev: &dyn Verbs, pd: PdId, qp_type: QpType, srq: Option<SrqId>) -> Result<End> {
    let region = Region::new(LEN);
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let keys = dev.reg_mr(pd, &region, access.bits())?;
    let cq = dev.create_cq(16)?;
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: qp_type as u32,
        sq_sig_all: true,
    };
    let created = dev.create_qp(pd, &init)?;
    Ok(End {
        qp: created.id,
        qp_num: created.qp_num,
        cq,
        region,
        keys,
    })
}

/// RESET -> INIT -> RTR -> RTS, aimed at QP `peer` behind `gid`.
fn connect(dev: &dyn Verbs, end: &End, peer: u32, gid: Gid, gid_index: u8) -> Result<()> {
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let init = QpAttr {
        qp_state: QpState::Init as u32,
        port_num: 1,
        qp_access_flags: access.bits(),
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX;
    dev.modify_qp(end.qp, &init, m | QpAttrMask::ACCESS_FLAGS)?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr as u32,
        path_mtu: MTU_1024,
        dest_qp_num: peer,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: gid,
                sgid_index: gid_index,
                hop_limit: 64,
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    dev.modify_qp(end.qp, &rtr, m)?;
    let rts = QpAttr {
        qp_state: QpState::Rts as u32,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    dev.modify_qp(end.qp, &rts, m)
}

/// A SEND from a to b (received through b's SRQ), an RDMA WRITE with
/// immediate from b to a, an RDMA READ by a of b's region and a
/// fetch-and-add by b on a's, checked.
fn exchange(dev: &dyn Verbs, a: &End, b: &End, srq: SrqId) -> Outcome<()> {
    let e = |e: Error| e.to_string();
    a.region.write(0, b"a SEND over softverbs' Rust API");
    dev.post_srq_recv(
        srq,
        &RecvWr {
            wr_id: 10,
            sg_list: &[b.region.sge(0, 64, b.keys.lkey)],
        },
    )
    .map_err(e)?;
    dev.req_notify_cq(b.cq, false).map_err(e)?;
    post(dev, a, 1, send_opcode::SEND, 0, 31, RdmaTarget::default())?;
    expect(dev, a, 1, WcOpcode::Send)?;
    let event = dev.get_cq_event(Duration::from_secs(10)).map_err(e)?;
    check(event == Some(b.cq), "the receive raised a completion event")?;
    let rx = expect(dev, b, 10, WcOpcode::Recv)?;
    // The SRQ's only WR is consumed: below its watermark of 1.
    let event = dev.get_async_event(Duration::from_secs(10)).map_err(e)?;
    check(
        event == Some(AsyncEvent::SrqLimitReached(srq)),
        "the SRQ's low watermark raised its event",
    )?;
    check(
        rx.byte_len == 31,
        "the SEND's receive completion has 31 bytes",
    )?;
    check(
        b.region.read(0, 31) == a.region.read(0, 31),
        "the SEND's bytes arrived",
    )?;

    b.region.write(512, b"an RDMA WRITE with immediate");
    dev.post_recv(
        a.qp,
        &RecvWr {
            wr_id: 20,
            sg_list: &[],
        },
    )
    .map_err(e)?;
    let target = RdmaTarget {
        remote_addr: a.region.addr() + 1024,
        rkey: a.keys.rkey,
    };
    let mut w = send(b, 2, send_opcode::RDMA_WRITE_WITH_IMM, 512, 28, target);
    w.imm_data_or_inv_rkey = 0x1234_5678;
    dev.post_send(b.qp, &w.wr(&w.sge)).map_err(e)?;
    expect(dev, b, 2, WcOpcode::RdmaWrite)?;
    let rx = expect(dev, a, 20, WcOpcode::RecvRdmaWithImm)?;
    check(
        rx.imm_data_or_inv_rkey == 0x1234_5678,
        "the immediate arrived",
    )?;
    check(
        a.region.read(1024, 28) == b.region.read(512, 28),
        "the WRITE's bytes arrived",
    )?;

    b.region.write(2048, b"read back by an RDMA READ");
    let target = RdmaTarget {
        remote_addr: b.region.addr() + 2048,
        rkey: b.keys.rkey,
    };
    post(dev, a, 3, send_opcode::RDMA_READ, 3072, 25, target)?;
    let wc = expect(dev, a, 3, WcOpcode::RdmaRead)?;
    check(wc.byte_len == 25, "the READ's completion has 25 bytes")?;
    check(
        a.region.read(3072, 25) == b.region.read(2048, 25),
        "the READ's bytes arrived",
    )?;

    a.region.write(4000, &40u64.to_ne_bytes());
    let mut w = send(
        b,
        4,
        send_opcode::ATOMIC_FETCH_AND_ADD,
        4008,
        8,
        RdmaTarget::default(),
    );
    w.atomic = AtomicTarget {
        remote_addr: a.region.addr() + 4000,
        compare_add: 2,
        swap: 0,
        rkey: a.keys.rkey,
    };
    dev.post_send(b.qp, &w.wr(&w.sge)).map_err(e)?;
    expect(dev, b, 4, WcOpcode::FetchAdd)?;
    check(
        b.region.read(4008, 8) == 40u64.to_ne_bytes(),
        "fetch-and-add returned the old value",
    )?;
    check(
        a.region.read(4000, 8) == 42u64.to_ne_bytes(),
        "fetch-and-add added",
    )?;
    Ok(())
}

/// The Q_Key of the UD QPs.
const QKEY: u32 = 0x1111_2222;

/// A UD QP from RESET to RTS.
fn ud_ready(dev: &dyn Verbs, end: &End) -> Result<()> {
    let init = QpAttr {
        qp_state: QpState::Init as u32,
        port_num: 1,
        qkey: QKEY,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY;
    dev.modify_qp(end.qp, &init, m)?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr as u32,
        ..QpAttr::default()
    };
    dev.modify_qp(end.qp, &rtr, QpAttrMask::STATE)?;
    let rts = QpAttr {
        qp_state: QpState::Rts as u32,
        ..QpAttr::default()
    };
    dev.modify_qp(end.qp, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
}

/// A UD datagram from c to d through an address handle: it arrives
/// behind the 40 bytes reserved for the GRH, from c's QP number.
fn datagram(dev: &dyn Verbs, pd: PdId, gid: Gid, gid_index: u8, c: &End, d: &End) -> Outcome<()> {
    let e = |e: Error| e.to_string();
    const GRH: usize = 40;
    let text = b"a UD datagram";
    c.region.write(0, text);
    let sge = [d.region.sge(0, 256, d.keys.lkey)];
    dev.post_recv(
        d.qp,
        &RecvWr {
            wr_id: 50,
            sg_list: &sge,
        },
    )
    .map_err(e)?;
    let ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid: gid,
            sgid_index: gid_index,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    };
    let ah = dev.create_ah(pd, &ah_attr).map_err(e)?;
    let p = send(
        c,
        5,
        send_opcode::SEND,
        0,
        text.len() as u32,
        RdmaTarget::default(),
    );
    let mut w = p.wr(&p.sge);
    w.ud = Some(UdTarget {
        ah,
        remote_qpn: d.qp_num,
        remote_qkey: QKEY,
    });
    dev.post_send(c.qp, &w).map_err(e)?;
    expect(dev, c, 5, WcOpcode::Send)?;
    let rx = expect(dev, d, 50, WcOpcode::Recv)?;
    check(
        rx.byte_len as usize == GRH + text.len(),
        "the datagram's length counts the GRH",
    )?;
    check(rx.src_qp == c.qp_num, "the datagram names its sender's QP")?;
    check(
        d.region.read(GRH, text.len()) == text,
        "the datagram's bytes arrived",
    )?;
    dev.destroy_ah(ah).map_err(e)
}

/// A signaled send-queue WR of `end` over its region from `offset`.
struct Post {
    wr_id: u64,
    opcode: u32,
    sge: [Sge; 1],
    rdma: RdmaTarget,
    atomic: AtomicTarget,
    imm_data_or_inv_rkey: u32,
}

impl Post {
    fn wr<'a>(&self, sge: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            send_flags: send_flags::SIGNALED,
            sg_list: sge,
            inline_data: &[],
            imm_data_or_inv_rkey: self.imm_data_or_inv_rkey,
            rdma: self.rdma,
            atomic: self.atomic,
            ud: None,
        }
    }
}

fn send(end: &End, wr_id: u64, opcode: u32, offset: usize, len: u32, rdma: RdmaTarget) -> Post {
    Post {
        wr_id,
        opcode,
        sge: [end.region.sge(offset, len, end.keys.lkey)],
        rdma,
        atomic: AtomicTarget::default(),
        imm_data_or_inv_rkey: 0,
    }
}

fn post(
    dev: &dyn Verbs,
    end: &End,
    wr_id: u64,
    opcode: u32,
    offset: usize,
    len: u32,
    rdma: RdmaTarget,
) -> Outcome<()> {
    let p = send(end, wr_id, opcode, offset, len, rdma);
    dev.post_send(end.qp, &p.wr(&p.sge))
        .map_err(|e| e.to_string())
}

/// Polls `end`'s CQ (for at most 10 s) for the completion of `wr_id`,
/// which must be a success with `opcode`.
fn expect(dev: &dyn Verbs, end: &End, wr_id: u64, opcode: WcOpcode) -> Outcome<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(wc) = dev.poll_cq(end.cq, 1).map_err(|e| e.to_string())?.pop() {
            let ok = wc.wr_id == wr_id && wc.status == WcStatus::Success && wc.opcode == opcode;
            return if ok {
                Ok(wc)
            } else {
                Err(format!("wanted WR {wr_id} {opcode:?} done, got {wc:?}"))
            };
        }
        if Instant::now() > deadline {
            return Err(format!("no completion for WR {wr_id} in 10 s"));
        }
        std::thread::yield_now();
    }
}

fn check(ok: bool, what: &str) -> Outcome<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("not so: {what}"))
    }
}
