package events

import (
	"bytes"
	"testing"
)

// FuzzRecord reads arbitrary bytes as the spool reads a record back after
// a crash: a header, then the body it announces. Whatever the bytes, the
// reader refuses them or splits them into a record whose encoding is the
// same bytes; and every record the recorder can write reads back as it was.
func FuzzRecord(f *testing.F) {
	f.Add([]byte("01HZX-1"), []byte(TypeBreakerRejected), []byte(`{"id":"01HZX-1"}`), []byte{})
	f.Add([]byte(""), []byte("t"), []byte(""), []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("x"), []byte(TypeRateLimited), []byte("{}"), []byte{255, 255, 255, 255, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, id, typ, data, raw []byte) {
		if len(id) <= 255 && len(typ) <= 255 {
			r := record{id: string(id), typ: string(typ), data: data}
			enc := r.appendTo(nil)
			if len(enc) != r.size() {
				t.Fatalf("size %d, encoded %d bytes", r.size(), len(enc))
			}
			got, err := readRecord(enc)
			if err != nil {
				t.Fatalf("a record as written does not read back: %v", err)
			}
			if got.id != r.id || got.typ != r.typ || !bytes.Equal(got.data, r.data) {
				t.Fatalf("read back %q %q %q, wrote %q %q %q", got.id, got.typ, got.data, r.id, r.typ, r.data)
			}
		}
		got, err := readRecord(raw)
		if err != nil {
			return
		}
		if again := got.appendTo(nil); !bytes.Equal(again, raw[:len(again)]) {
			t.Fatalf("%x read as %q %q %q, which encodes as %x", raw, got.id, got.typ, got.data, again)
		}
	})
}

// readRecord reads one record from the start of b as the spool does.
func readRecord(b []byte) (record, error) {
	if len(b) < headerSize {
		return record{}, errTorn
	}
	n, sum, err := parseHeader(b)
	if err != nil {
		return record{}, err
	}
	if len(b) < headerSize+n {
		return record{}, errTorn
	}
	return parseBody(b[headerSize:headerSize+n], sum)
}
