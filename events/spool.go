package events

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The spool is a directory of append-only segment files, named by a
// hexadecimal index that only grows, plus an offset file that says how far
// the forwarder has delivered. One writer goroutine appends; one forwarder
// goroutine reads and deletes. They share only the segment list and the
// delivered position, under mu: the writer publishes a segment's size
// after the bytes are fsynced, and the forwarder never reads past a
// published size, so it never sees a record that a crash could still take
// away. The writer deletes a segment only in reclaim, once the forwarder
// has published that every record of the spool is delivered.
type spool struct {
	dir    string
	max    int64 // spool_max_bytes: bounds the sum of the segment files' sizes
	segMax int64 // a segment is sealed once it would grow past this
	log    *slog.Logger
	lock   *os.File

	// active is the segment the writer appends to; activeSize its size.
	// Only the writer touches them.
	active     *os.File
	activeIdx  uint64
	activeSize int64
	buf        []byte

	offset *os.File // the forwarder's durable position; only it writes
	// synced is when the offset file was last fsynced; only the
	// forwarder touches it.
	synced time.Time

	mu    sync.Mutex
	segs  []*segment // in index order; the last is the active one
	bytes int64      // the sum of every segment's size
	// sentSeg and sentOff are the forwarder's position as of its last
	// commit: every record before it is in the sink.
	sentSeg uint64
	sentOff int64

	// pending counts the records not yet delivered: the
	// gateway_events_spooled gauge.
	pending atomic.Int64
	// recSize is the mean size of the records of the last batch
	// appended: read reads about a batch's worth of them, not its whole
	// byte bound (a fresh buffer, zeroed, for every batch).
	recSize atomic.Int64
}

type segment struct {
	idx    uint64
	size   int64 // bytes fsynced; a reader stops here
	sealed bool  // no more bytes will come
}

// cursor is the forwarder's read position: the next record to deliver.
type cursor struct {
	seg uint64
	off int64
	f   *os.File // seg, open for reading; nil until needed
}

const (
	segSuffix  = ".seg"
	offsetFile = "offset"
	lockFile   = "LOCK"

	// The segment size is a sixteenth of the spool's bound, so that
	// deleting delivered segments can free space in steps small against
	// the bound, within limits that keep the file count and the per-file
	// overhead reasonable.
	minSegment = 4 << 10
	maxSegment = 64 << 20

	offsetSize = 20 // u64 segment, u64 offset, u32 CRC-32C of the 16 bytes
)

var (
	errSpoolFull = errors.New("the events spool is full")
	errClosed    = errors.New("the events recorder is closed")
)

// openSpool opens or creates the spool in dir, recovers it after a crash,
// and returns it with the position to deliver from.
func openSpool(dir string, maxBytes int64, log *slog.Logger) (*spool, *cursor, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("events: spool_dir: %w", err)
	}
	s := &spool{
		dir:    dir,
		max:    maxBytes,
		segMax: min(max(maxBytes/16, minSegment), maxSegment),
		log:    log,
	}
	var err error
	if s.lock, err = lockDir(filepath.Join(dir, lockFile)); err != nil {
		return nil, nil, fmt.Errorf("events: spool_dir %s: %w", dir, err)
	}
	c, err := s.recover()
	if err != nil {
		s.close()
		return nil, nil, fmt.Errorf("events: spool_dir %s: %w", dir, err)
	}
	return s, c, nil
}

// recover reads the offset file, deletes the segments it says were
// delivered, checks every remaining record and cuts a torn tail, counts
// what is left to deliver, and opens a fresh active segment. A crash can
// leave only a torn tail (records are appended, then fsynced, then
// acknowledged), so whatever was acknowledged survives recovery.
func (s *spool) recover() (*cursor, error) {
	var err error
	s.offset, err = os.OpenFile(filepath.Join(s.dir, offsetFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	c := &cursor{}
	var b [offsetSize]byte
	if n, _ := s.offset.ReadAt(b[:], 0); n == offsetSize {
		if crc32.Checksum(b[:16], crcTable) == binary.LittleEndian.Uint32(b[16:]) {
			c.seg = binary.LittleEndian.Uint64(b[0:])
			c.off = int64(binary.LittleEndian.Uint64(b[8:]))
		} else {
			// Delivering from the oldest segment again only repeats
			// events, which at-least-once allows; guessing could lose some.
			s.log.Warn("events: the spool's offset file is corrupt; delivering the spool from its start again", "dir", s.dir)
		}
	}

	idxs, err := s.segmentFiles()
	if err != nil {
		return nil, err
	}
	var last uint64
	for _, idx := range idxs {
		last = max(last, idx)
		if idx < c.seg {
			// Delivered: the crash came between the offset write and
			// the delete.
			if err := os.Remove(s.segPath(idx)); err != nil {
				return nil, err
			}
			continue
		}
		size, n, err := s.check(idx, c)
		if err != nil {
			return nil, err
		}
		s.segs = append(s.segs, &segment{idx: idx, size: size, sealed: true})
		s.bytes += size
		s.pending.Add(n)
	}
	if len(s.segs) == 0 || s.segs[0].idx != c.seg {
		// The offset's segment is gone (fully delivered, or never
		// written): deliver from the first segment there is.
		c.off = 0
		c.seg = last + 1
		if len(s.segs) > 0 {
			c.seg = s.segs[0].idx
		}
	}
	if err := s.roll(max(last+1, c.seg)); err != nil {
		return nil, err
	}
	return c, nil
}

// segmentFiles lists the segment indexes in dir, in order.
func (s *spool) segmentFiles() ([]uint64, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var idxs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok || e.IsDir() {
			continue
		}
		idx, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	return idxs, nil
}

func (s *spool) segPath(idx uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016x%s", idx, segSuffix))
}

// check reads every record of segment idx, truncates the file after the
// last good one, and returns the good size and how many records lie at or
// after the cursor. If the cursor points into this segment but not at a
// record boundary (only a corrupt offset file could do that), it is moved
// back to the boundary before, which repeats a record rather than losing
// one.
func (s *spool) check(idx uint64, c *cursor) (size, undelivered int64, err error) {
	f, err := os.OpenFile(s.segPath(idx), os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	r := bufio.NewReaderSize(f, 256<<10)
	var (
		pos  int64
		hdr  [headerSize]byte
		body []byte
	)
	// torn reports whether a read error means the file ends inside a
	// record; any other error is the disk's, and recovery must not cut
	// good records because of it.
	torn := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !torn(err) {
				return 0, 0, err
			}
			break
		}
		n, sum, err := parseHeader(hdr[:])
		if err != nil {
			break
		}
		body = slices.Grow(body[:0], n)[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			if !torn(err) {
				return 0, 0, err
			}
			break
		}
		if _, err := parseBody(body, sum); err != nil {
			break
		}
		next := pos + headerSize + int64(n)
		if idx == c.seg && c.off > pos && c.off < next {
			c.off = pos
		}
		if idx > c.seg || pos >= c.off {
			undelivered++
		}
		pos = next
	}
	if idx == c.seg && c.off > pos {
		c.off = pos
	}
	if pos < st.Size() {
		s.log.Warn("events: truncating a torn record at the end of a spool segment (left by a crash; it was never acknowledged)",
			"segment", filepath.Base(f.Name()), "bytes", st.Size()-pos)
		if err := f.Truncate(pos); err != nil {
			return 0, 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, 0, err
		}
	}
	return pos, undelivered, nil
}

// roll seals the active segment, if any, and starts segment idx. The
// directory is fsynced so that the new file's name survives a crash along
// with the records fsynced into it.
func (s *spool) roll(idx uint64) error {
	f, err := os.OpenFile(s.segPath(idx), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if s.active != nil {
		s.active.Close()
	}
	s.active, s.activeIdx, s.activeSize = f, idx, 0
	s.mu.Lock()
	if n := len(s.segs); n > 0 {
		s.segs[n-1].sealed = true
	}
	s.segs = append(s.segs, &segment{idx: idx})
	s.mu.Unlock()
	return nil
}

// append writes the batch's records to the active segment, rolling to new
// segments as they fill, and fsyncs once. It sets p.err on every pending
// event: errSpoolFull for those the bound refuses, the I/O error for all
// the others if writing fails, nil for those now durable.
func (s *spool) append(batch []*pending) {
	var need int64
	for _, p := range batch {
		if p.err == nil {
			need += int64(p.rec.size())
		}
	}
	if s.used()+need > s.max {
		s.reclaim()
	}
	s.mu.Lock()
	total := s.bytes
	s.mu.Unlock()
	s.buf = s.buf[:0]
	var waiting []*pending // in buf, not yet fsynced
	for i, p := range batch {
		if p.err != nil {
			continue
		}
		sz := int64(p.rec.size())
		if total+sz > s.max {
			p.err = errSpoolFull
			continue
		}
		if (s.activeSize > 0 || len(s.buf) > 0) && s.activeSize+int64(len(s.buf))+sz > s.segMax {
			if err := s.flush(); err != nil {
				failAll(waiting, err)
				failAll(batch[i:], err)
				return
			}
			waiting = waiting[:0]
			if err := s.roll(s.activeIdx + 1); err != nil {
				// Keep appending to the full segment rather than
				// refusing: the bound is on the spool, not on segments.
				s.log.Error("events: cannot start a new spool segment", "error", err.Error())
			}
		}
		s.buf = p.rec.appendTo(s.buf)
		total += sz
		waiting = append(waiting, p)
	}
	if len(waiting) > 0 {
		s.recSize.Store(int64(len(s.buf)) / int64(len(waiting)))
	}
	if err := s.flush(); err != nil {
		failAll(waiting, err)
	}
}

// reclaim deletes the spool's segments when the forwarder has delivered
// every record in them, so that a spool the sink has drained takes a full
// bound of events again. The forwarder deletes a segment once it has read
// past it, but never the active one, which the writer may still append
// to; and the active segment only rolls at segMax, which is most of a
// small spool_max_bytes, or more. Without reclaim, such a spool would stay
// full of delivered records until a restart; with the default bound, up
// to a 64 MiB segment of them would count against it. Reclaiming only
// when the bound would refuse costs nothing on the usual path: a spool
// with room keeps appending to its segment.
//
// The writer rolls to a new segment first, its name fsynced, and only
// then deletes the delivered ones. A spool_dir left with no segment at all
// would make recovery number the next one from 1, not after the segment
// the offset file names, and a second crash would then skip its records
// as delivered. Unlike the forwarder's deletes, this needs no durable
// offset first: a crash before the delete leaves delivered records, which
// recovery skips by the offset or, at worst, delivers again with their
// ids; a crash after it leaves an offset that names a segment that is
// gone, and recovery delivers from the start of the first one there is,
// the new one, of which nothing was delivered. Either way no record is
// lost and the order holds.
func (s *spool) reclaim() {
	s.mu.Lock()
	done := s.activeSize > 0 && s.sentSeg == s.activeIdx && s.sentOff == s.activeSize
	s.mu.Unlock()
	if !done {
		return
	}
	last := s.activeIdx
	if err := s.roll(last + 1); err != nil {
		s.log.Error("events: cannot start a new spool segment to free delivered ones", "error", err.Error())
		return
	}
	// The forwarder may have deleted some of them meanwhile, when it
	// moved past the one just sealed.
	s.deleteBefore(last + 1)
}

// deleteBefore deletes the segments before index idx, never the active
// one: their records are all delivered.
func (s *spool) deleteBefore(idx uint64) {
	s.mu.Lock()
	var gone []*segment
	for len(s.segs) > 1 && s.segs[0].idx < idx {
		gone = append(gone, s.segs[0])
		s.bytes -= s.segs[0].size
		s.segs = s.segs[1:]
	}
	s.mu.Unlock()
	for _, g := range gone {
		if err := os.Remove(s.segPath(g.idx)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("events: cannot delete a delivered spool segment", "error", err.Error())
		}
	}
}

// failAll sets err on every pending event that has no outcome yet.
func failAll(ps []*pending, err error) {
	for _, p := range ps {
		if p.err == nil {
			p.err = err
		}
	}
}

// flush writes and fsyncs buf to the active segment and publishes the new
// size. On failure it cuts the segment back to its published size, so that
// a later append does not follow garbage.
func (s *spool) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	n := int64(len(s.buf))
	_, err := s.active.WriteAt(s.buf, s.activeSize)
	if err == nil {
		err = s.active.Sync()
	}
	if err != nil {
		if terr := s.active.Truncate(s.activeSize); terr != nil {
			s.log.Error("events: cannot cut a failed write from the spool", "error", terr.Error())
		}
		return fmt.Errorf("events: writing the spool: %w", err)
	}
	s.activeSize += n
	s.mu.Lock()
	s.segs[len(s.segs)-1].size = s.activeSize
	s.bytes += n
	s.mu.Unlock()
	s.pending.Add(countRecords(s.buf))
	s.buf = s.buf[:0]
	return nil
}

// countRecords counts the records in an encoded buffer.
func countRecords(b []byte) int64 {
	var n int64
	for len(b) >= headerSize {
		l := int(binary.LittleEndian.Uint32(b))
		b = b[headerSize+l:]
		n++
	}
	return n
}

// used returns the spool's size on disk.
func (s *spool) used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// segmentAt returns what is published of segment idx, or of the first
// segment after it when idx is gone.
func (s *spool) segmentAt(idx uint64) (segment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.segs {
		if g.idx >= idx {
			return *g, true
		}
	}
	return segment{}, false
}

// read returns up to maxN records from the cursor, within about maxBytes,
// and the offset after each. It moves the cursor past sealed segments it
// has read to their end. No records and no error: nothing to deliver yet.
func (s *spool) read(c *cursor, maxN int, maxBytes int64, buf []byte) (recs []record, ends []int64, _ []byte, err error) {
	for {
		g, ok := s.segmentAt(c.seg)
		if !ok {
			return nil, nil, buf, nil
		}
		if g.idx != c.seg {
			// The writer deleted the cursor's segment, wholly delivered,
			// to free its space (reclaim): go on from the next one.
			if err := s.moveTo(c, g.idx); err != nil {
				return nil, nil, buf, err
			}
			continue
		}
		if c.off >= g.size {
			if !g.sealed {
				return nil, nil, buf, nil
			}
			next, ok := s.segmentAt(c.seg + 1)
			if !ok {
				return nil, nil, buf, nil
			}
			if err := s.moveTo(c, next.idx); err != nil {
				return nil, nil, buf, err
			}
			continue
		}
		if c.f == nil {
			if c.f, err = os.Open(s.segPath(c.seg)); err != nil {
				return nil, nil, buf, err
			}
		}
		want := min(g.size-c.off, maxBytes)
		if m := s.recSize.Load(); m > 0 {
			// Records of about the last batch's size: a read that falls
			// short makes a smaller batch, the rest comes next.
			want = min(want, int64(maxN)*m*5/4+64<<10)
		}
		buf = slices.Grow(buf[:0], int(want))[:want]
		if _, err := c.f.ReadAt(buf, c.off); err != nil {
			return nil, nil, buf, err
		}
		pos := c.off
		for b := buf; len(b) >= headerSize && len(recs) < maxN; {
			n, sum, err := parseHeader(b)
			if err == nil && len(b) < headerSize+n {
				if len(recs) > 0 {
					break
				}
				// One record larger than maxBytes: read it whole.
				want = headerSize + int64(n)
				buf = slices.Grow(buf[:0], int(want))[:want]
				if _, err := c.f.ReadAt(buf, c.off); err != nil {
					return nil, nil, buf, err
				}
				b = buf
			}
			var r record
			if err == nil {
				r, err = parseBody(b[headerSize:headerSize+n], sum)
			}
			if err != nil {
				// Published bytes were fsynced and checked on their way
				// in; failing now means the disk changed under us. Skip
				// the rest of the segment rather than stall forever.
				s.log.Error("events: a spooled record is corrupt; skipping the rest of its segment",
					"segment", filepath.Base(s.segPath(c.seg)), "offset", pos)
				if len(recs) > 0 {
					return recs, ends, buf, nil
				}
				c.off = g.size
				break
			}
			pos += headerSize + int64(n)
			recs = append(recs, r)
			ends = append(ends, pos)
			b = b[headerSize+n:]
		}
		if len(recs) > 0 {
			return recs, ends, buf, nil
		}
	}
}

// moveTo moves the cursor to the start of segment idx, persists that, and
// deletes every segment before it: they are delivered.
func (s *spool) moveTo(c *cursor, idx uint64) error {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
	c.seg, c.off = idx, 0
	return s.commit(c)
}

// offsetSyncEvery bounds how often the offset file is fsynced while it only
// moves within a segment. The position is written after every delivered
// batch; a crash loses at most this much of its progress, and the events
// after the last synced position are delivered again with the same ids,
// which at-least-once delivery allows. An fsync per batch cost as much as
// the spool's own group commits.
const offsetSyncEvery = 100 * time.Millisecond

// commit persists the cursor, then deletes the segments before it. In that
// order, a crash between the two leaves delivered segments that recovery
// deletes, never a position that points past undelivered ones.
func (s *spool) commit(c *cursor) error {
	var b [offsetSize]byte
	binary.LittleEndian.PutUint64(b[0:], c.seg)
	binary.LittleEndian.PutUint64(b[8:], uint64(c.off))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], crcTable))
	// Twenty bytes at the start of a file sit in one sector and are
	// written whole or not at all on the disks we know of; the CRC covers
	// the rest (recovery then redelivers from the oldest segment).
	if _, err := s.offset.WriteAt(b[:], 0); err != nil {
		return err
	}
	s.mu.Lock()
	s.sentSeg, s.sentOff = c.seg, c.off
	deletes := len(s.segs) > 1 && s.segs[0].idx < c.seg
	s.mu.Unlock()
	// A segment may only be deleted once the position past it is durable.
	if now := time.Now(); deletes || now.Sub(s.synced) >= offsetSyncEvery {
		if err := s.offset.Sync(); err != nil {
			return err
		}
		s.synced = now
	}
	s.deleteBefore(c.seg)
	return nil
}

func (s *spool) close() {
	if s.active != nil {
		s.active.Close()
	}
	if s.offset != nil {
		s.offset.Sync()
		s.offset.Close()
	}
	if s.lock != nil {
		s.lock.Close() // releases the flock
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
