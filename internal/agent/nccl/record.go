// Package nccl reads the NCCL shim's shared-memory rings (native/ncclshim,
// byte layout in native/ncclshim/record.h and docs/format/ncclshim-ring.md)
// and turns their records into collective calls and communicators.
//
// The shim is the producer (Greyhound §4.2: the Monitor logs intercepted
// NCCL calls to shared memory); this package is the one consumer per
// ring. It never blocks the producer: it only advances the ring's read
// index after copying records out, and sets the pause word on request
// (§4.3 validation trap).
package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Layout constants; they must equal record.h's.
const (
	Magic        = 0x31474E49524C474C // "LGLRING1" little-endian
	Version      = 2
	HeaderSize   = 4096
	RecordSize   = 128
	FilePrefix   = "laggard-nccl."
	jobLen       = 128
	hostLen      = 64
	maxCapacity  = 1 << 24
	HdrCUDAEvent = 0x1
)

// Header byte offsets (record.h lg_ring_header).
const (
	offMagic        = 0
	offVersion      = 8
	offRecordSize   = 12
	offCapacity     = 16
	offHeaderSize   = 24
	offPID          = 28
	offWriteIndex   = 32
	offReadIndex    = 40
	offDropped      = 48
	offPause        = 56
	offPauseTimeout = 60
	offTrapped      = 64
	offTrappedNS    = 72
	offStartNS      = 80
	offProcStart    = 88
	offRank         = 96
	offWorld        = 100
	offLocalRank    = 104
	offFlags        = 108
	offJob          = 112
	offHost         = 240
	offPauseExpired = 304
)

// Record kinds (record.h enum lg_op); 1..8 equal collective.Op.
const (
	OpCommInit    = 64
	OpCommInitAll = 65
	OpCommSplit   = 66
	OpCommDestroy = 67
)

// Record flags.
const (
	FlagGrouped = 0x1
	FlagDevice  = 0x2
	FlagLazy    = 0x4
)

// Header is the decoded ring header.
type Header struct {
	Capacity       uint64
	PID            uint32
	WriteIndex     uint64
	ReadIndex      uint64
	Dropped        uint64
	Pause          uint32 // generation: odd armed, even released
	PauseExpired   uint32 // last armed generation whose trap timed out
	PauseTimeoutMS uint32
	Trapped        uint64
	TrappedNS      uint64
	StartNS        int64
	ProcStart      uint64
	Rank           int32
	World          int32
	LocalRank      int32
	Flags          uint32
	Job            string
	Host           string
}

// Record is one decoded ring slot.
type Record struct {
	Ticket     uint64
	Op         uint16
	Dtype      uint8
	Flags      uint8
	CommRank   int32
	CommID     uint64
	NRanks     int32
	Peer       int32
	Seq        int64
	Count      uint64
	Bytes      uint64
	Stream     uint64
	EnterNS    int64
	ReturnNS   int64
	DevStartNS int64
	DevEndNS   int64
	Root       int32
	RedOp      int32
	Aux        uint64
	Result     int32
	Color      int32
	Key        int32
	TID        uint32
}

var le = binary.LittleEndian

// ErrNotReady marks a ring file whose producer has not finished creating
// it (no magic yet).
var ErrNotReady = errors.New("ring not initialised yet")

// DecodeHeader checks and decodes a ring header; size is the file size.
func DecodeHeader(b []byte, size int64) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("header: %d bytes, want %d", len(b), HeaderSize)
	}
	if m := le.Uint64(b[offMagic:]); m != Magic {
		if m == 0 {
			return Header{}, ErrNotReady
		}
		return Header{}, fmt.Errorf("header: magic %#x, want %#x", m, uint64(Magic))
	}
	if v := le.Uint32(b[offVersion:]); v != Version {
		return Header{}, fmt.Errorf("header: version %d, this agent reads %d", v, Version)
	}
	if rs := le.Uint32(b[offRecordSize:]); rs != RecordSize {
		return Header{}, fmt.Errorf("header: record_size %d, want %d", rs, RecordSize)
	}
	if hs := le.Uint32(b[offHeaderSize:]); hs != HeaderSize {
		return Header{}, fmt.Errorf("header: header_size %d, want %d", hs, HeaderSize)
	}
	h := Header{
		Capacity:       le.Uint64(b[offCapacity:]),
		PID:            le.Uint32(b[offPID:]),
		WriteIndex:     le.Uint64(b[offWriteIndex:]),
		ReadIndex:      le.Uint64(b[offReadIndex:]),
		Dropped:        le.Uint64(b[offDropped:]),
		Pause:          le.Uint32(b[offPause:]),
		PauseExpired:   le.Uint32(b[offPauseExpired:]),
		PauseTimeoutMS: le.Uint32(b[offPauseTimeout:]),
		Trapped:        le.Uint64(b[offTrapped:]),
		TrappedNS:      le.Uint64(b[offTrappedNS:]),
		StartNS:        int64(le.Uint64(b[offStartNS:])),
		ProcStart:      le.Uint64(b[offProcStart:]),
		Rank:           int32(le.Uint32(b[offRank:])),
		World:          int32(le.Uint32(b[offWorld:])),
		LocalRank:      int32(le.Uint32(b[offLocalRank:])),
		Flags:          le.Uint32(b[offFlags:]),
		Job:            cString(b[offJob : offJob+jobLen]),
		Host:           cString(b[offHost : offHost+hostLen]),
	}
	if h.Capacity < 8 || h.Capacity > maxCapacity || h.Capacity&(h.Capacity-1) != 0 {
		return Header{}, fmt.Errorf("header: capacity %d is not a power of two in [8, %d]", h.Capacity, maxCapacity)
	}
	if want := int64(HeaderSize) + int64(h.Capacity)*RecordSize; size != want {
		return Header{}, fmt.Errorf("header: file is %d bytes, capacity %d needs %d", size, h.Capacity, want)
	}
	return h, nil
}

// DecodeRecord decodes one 128-byte slot. It checks only the layout;
// Translate checks the values.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) != RecordSize {
		return Record{}, fmt.Errorf("record: %d bytes, want %d", len(b), RecordSize)
	}
	return Record{
		Ticket:     le.Uint64(b[0:]),
		Op:         le.Uint16(b[8:]),
		Dtype:      b[10],
		Flags:      b[11],
		CommRank:   int32(le.Uint32(b[12:])),
		CommID:     le.Uint64(b[16:]),
		NRanks:     int32(le.Uint32(b[24:])),
		Peer:       int32(le.Uint32(b[28:])),
		Seq:        int64(le.Uint64(b[32:])),
		Count:      le.Uint64(b[40:]),
		Bytes:      le.Uint64(b[48:]),
		Stream:     le.Uint64(b[56:]),
		EnterNS:    int64(le.Uint64(b[64:])),
		ReturnNS:   int64(le.Uint64(b[72:])),
		DevStartNS: int64(le.Uint64(b[80:])),
		DevEndNS:   int64(le.Uint64(b[88:])),
		Root:       int32(le.Uint32(b[96:])),
		RedOp:      int32(le.Uint32(b[100:])),
		Aux:        le.Uint64(b[104:]),
		Result:     int32(le.Uint32(b[112:])),
		Color:      int32(le.Uint32(b[116:])),
		Key:        int32(le.Uint32(b[120:])),
		TID:        le.Uint32(b[124:]),
	}, nil
}

// EncodeRecord is DecodeRecord's inverse (test writers, fuzz round trip).
func EncodeRecord(b []byte, r *Record) {
	_ = b[RecordSize-1]
	le.PutUint64(b[0:], r.Ticket)
	le.PutUint16(b[8:], r.Op)
	b[10] = r.Dtype
	b[11] = r.Flags
	le.PutUint32(b[12:], uint32(r.CommRank))
	le.PutUint64(b[16:], r.CommID)
	le.PutUint32(b[24:], uint32(r.NRanks))
	le.PutUint32(b[28:], uint32(r.Peer))
	le.PutUint64(b[32:], uint64(r.Seq))
	le.PutUint64(b[40:], r.Count)
	le.PutUint64(b[48:], r.Bytes)
	le.PutUint64(b[56:], r.Stream)
	le.PutUint64(b[64:], uint64(r.EnterNS))
	le.PutUint64(b[72:], uint64(r.ReturnNS))
	le.PutUint64(b[80:], uint64(r.DevStartNS))
	le.PutUint64(b[88:], uint64(r.DevEndNS))
	le.PutUint32(b[96:], uint32(r.Root))
	le.PutUint32(b[100:], uint32(r.RedOp))
	le.PutUint64(b[104:], r.Aux)
	le.PutUint32(b[112:], uint32(r.Result))
	le.PutUint32(b[116:], uint32(r.Color))
	le.PutUint32(b[120:], uint32(r.Key))
	le.PutUint32(b[124:], r.TID)
}

// EncodeHeader writes a complete header (magic included) into b.
func EncodeHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	le.PutUint64(b[offMagic:], Magic)
	le.PutUint32(b[offVersion:], Version)
	le.PutUint32(b[offRecordSize:], RecordSize)
	le.PutUint64(b[offCapacity:], h.Capacity)
	le.PutUint32(b[offHeaderSize:], HeaderSize)
	le.PutUint32(b[offPID:], h.PID)
	le.PutUint64(b[offWriteIndex:], h.WriteIndex)
	le.PutUint64(b[offReadIndex:], h.ReadIndex)
	le.PutUint64(b[offDropped:], h.Dropped)
	le.PutUint32(b[offPause:], h.Pause)
	le.PutUint32(b[offPauseExpired:], h.PauseExpired)
	le.PutUint32(b[offPauseTimeout:], h.PauseTimeoutMS)
	le.PutUint64(b[offTrapped:], h.Trapped)
	le.PutUint64(b[offTrappedNS:], h.TrappedNS)
	le.PutUint64(b[offStartNS:], uint64(h.StartNS))
	le.PutUint64(b[offProcStart:], h.ProcStart)
	le.PutUint32(b[offRank:], uint32(h.Rank))
	le.PutUint32(b[offWorld:], uint32(h.World))
	le.PutUint32(b[offLocalRank:], uint32(h.LocalRank))
	le.PutUint32(b[offFlags:], h.Flags)
	putCString(b[offJob:offJob+jobLen], h.Job)
	putCString(b[offHost:offHost+hostLen], h.Host)
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b[:len(b)-1]) // the shim always leaves a NUL; be safe
}

func putCString(b []byte, s string) {
	clear(b)
	copy(b[:len(b)-1], s)
}

// CommID renders a communicator id as collective.Comm.ID: 16 hex digits.
func CommID(id uint64) string {
	s := strconv.FormatUint(id, 16)
	if len(s) < 16 {
		s = "0000000000000000"[len(s):] + s
	}
	return s
}
