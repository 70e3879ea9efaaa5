package events

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// record is an event as the spool and the sinks handle it: already encoded,
// with the two fields that sinks and metrics need outside the JSON, so that
// nothing after Record decodes an event again.
type record struct {
	id   string
	typ  string
	data []byte // the event's JSON

	// The Kafka record's route header and key, as readKafkaFields reads
	// them from data: known when the record comes from Record or Audit
	// rather than the spool, whose format does not keep them.
	kafka    bool
	route    string
	kafkaKey []byte
}

// setKafka fills r's Kafka key and route from e, the event r encodes.
func (r *record) setKafka(e *Event) {
	r.kafka, r.route, r.kafkaKey = true, jsonText(e.Route), limitingKey(e.Keys)
}

// A spooled record on disk is
//
//	u32 length of BODY, little endian
//	u32 CRC-32C of BODY
//	BODY: u8 len(id), id, u8 len(type), type, JSON
//
// The length comes first so that a reader can tell a record that was cut
// short by a crash (the file ends before length bytes) from a complete
// one; the CRC catches a tail whose length landed on disk but whose bytes
// did not, which a file system may show as zeros or garbage after a power
// cut. A zero length is never written, so a zero-filled tail is torn, not
// an empty record.
const (
	headerSize = 8
	// maxRecord bounds a record's length as read back, so that a corrupt
	// length cannot make recovery allocate gigabytes.
	maxRecord = 64 << 20
)

var (
	crcTable = crc32.MakeTable(crc32.Castagnoli)

	errTorn = errors.New("torn or corrupt record")
)

// size is the record's length on disk.
func (r *record) size() int {
	return headerSize + 2 + len(r.id) + len(r.typ) + len(r.data)
}

// appendTo appends the record's on-disk form to b.
func (r *record) appendTo(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = append(b, byte(len(r.id)))
	b = append(b, r.id...)
	b = append(b, byte(len(r.typ)))
	b = append(b, r.typ...)
	b = append(b, r.data...)
	body := b[start+headerSize:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, crcTable))
	return b
}

// parseHeader returns the body length announced by a record header.
func parseHeader(h []byte) (n int, sum uint32, err error) {
	n = int(binary.LittleEndian.Uint32(h))
	if n < 2 || n > maxRecord {
		return 0, 0, errTorn
	}
	return n, binary.LittleEndian.Uint32(h[4:]), nil
}

// parseBody checks a record body against its CRC and splits it. The
// returned record aliases body.
func parseBody(body []byte, sum uint32) (record, error) {
	if crc32.Checksum(body, crcTable) != sum {
		return record{}, errTorn
	}
	var r record
	n := int(body[0])
	if 1+n+1 > len(body) {
		return record{}, errTorn
	}
	r.id = string(body[1 : 1+n])
	body = body[1+n:]
	n = int(body[0])
	if 1+n > len(body) {
		return record{}, errTorn
	}
	r.typ = string(body[1 : 1+n])
	r.data = body[1+n:]
	return r, nil
}
