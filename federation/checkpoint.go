package federation

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/tensor"
)

// CheckpointFile is the name of the checkpoint inside a CheckpointDir.
const CheckpointFile = "federation.ckpt"

// Checkpoint is the coordinator's state after a round: everything the server
// side needs to continue exactly. Clients keep their own state (SiteStore).
type Checkpoint struct {
	// NextRound is the first round still to run.
	NextRound int
	// Strategy is the strategy's Name.
	Strategy string
	// Seed and Fraction are the sampler settings of the run (informative:
	// the sampler's full state is Sampler).
	Seed     uint64
	Fraction float64
	// Sampler is the sampler's marshalled generator state.
	Sampler []byte
	// History holds the reports of rounds 0..NextRound-1.
	History History
	// Clients lists the IDs of the federation's clients.
	Clients []int
	// StrategyState is the strategy's State.
	StrategyState tensor.Named
}

// File layout (all integers little endian):
//
//	"PFEDCKPT"                      8-byte magic
//	tensor data                     float32 values of each tensor, back to back
//	index                           JSON: checkpointIndex
//	trailer                         u64 index offset, u64 index length,
//	                                u32 CRC-32C of the index, "PFCK"
//
// Every tensor entry records its offset and the CRC-32C of its bytes, so a
// damaged file is reported with the entry that is wrong. Tensor names are
// "strategy/<name>".
const (
	ckptMagic   = "PFEDCKPT"
	ckptEnd     = "PFCK"
	trailerSize = 24
	ckptFormat  = "pfedmma-federation/2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type checkpointIndex struct {
	Format    string        `json:"format"`
	NextRound int           `json:"next_round"`
	Strategy  string        `json:"strategy"`
	Seed      uint64        `json:"seed"`
	Fraction  float64       `json:"fraction"`
	Sampler   []byte        `json:"sampler"`
	Clients   []int         `json:"clients"`
	History   History       `json:"history"`
	Tensors   []tensorEntry `json:"tensors"`
}

type tensorEntry struct {
	Name   string `json:"name"`
	Shape  []int  `json:"shape"`
	Offset int64  `json:"offset"`
	CRC    uint32 `json:"crc32c"`
}

// WriteCheckpoint writes c to path atomically (internal/atomicfile): an
// existing checkpoint stays intact until the new one is complete.
func WriteCheckpoint(path string, c *Checkpoint) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return writeCheckpoint(w, c) }); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return nil
}

func writeCheckpoint(w io.Writer, c *Checkpoint) error {
	all := tensor.Named{}
	ids := slices.Sorted(slices.Values(c.Clients))
	for k, v := range c.StrategyState {
		all["strategy/"+k] = v
	}
	idx := checkpointIndex{
		Format: ckptFormat, NextRound: c.NextRound, Strategy: c.Strategy, Seed: c.Seed,
		Fraction: c.Fraction, Sampler: c.Sampler, Clients: ids, History: c.History,
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	off := int64(len(ckptMagic))
	if _, err := bw.WriteString(ckptMagic); err != nil {
		return err
	}
	var buf []byte
	for _, name := range slices.Sorted(maps.Keys(all)) {
		t := all[name]
		if t == nil || tensor.Numel(t.Shape) != len(t.Data) {
			return fmt.Errorf("tensor %q: shape does not match data", name)
		}
		buf = buf[:0]
		for _, v := range t.Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		idx.Tensors = append(idx.Tensors, tensorEntry{Name: name, Shape: t.Shape, Offset: off, CRC: crc32.Checksum(buf, castagnoli)})
		off += int64(len(buf))
	}
	js, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if _, err := bw.Write(js); err != nil {
		return err
	}
	var tr [trailerSize]byte
	binary.LittleEndian.PutUint64(tr[0:], uint64(off))
	binary.LittleEndian.PutUint64(tr[8:], uint64(len(js)))
	binary.LittleEndian.PutUint32(tr[16:], crc32.Checksum(js, castagnoli))
	copy(tr[20:], ckptEnd)
	if _, err := bw.Write(tr[:]); err != nil {
		return err
	}
	return bw.Flush()
}

// ReadCheckpoint reads and verifies a checkpoint written by WriteCheckpoint.
// Errors name the file and, for damaged data, the entry.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	c, err := readCheckpoint(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

var errNotCheckpoint = errors.New("not a federation checkpoint")

func readCheckpoint(f io.ReaderAt, size int64) (*Checkpoint, error) {
	if size < int64(len(ckptMagic))+trailerSize {
		return nil, fmt.Errorf("%w: file of %d bytes is too short", errNotCheckpoint, size)
	}
	var head [len(ckptMagic)]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, fmt.Errorf("magic: %w", err)
	}
	if string(head[:]) != ckptMagic {
		return nil, fmt.Errorf("%w: bad magic %q", errNotCheckpoint, head[:])
	}
	var tr [trailerSize]byte
	if _, err := f.ReadAt(tr[:], size-trailerSize); err != nil {
		return nil, fmt.Errorf("trailer: %w", err)
	}
	if string(tr[20:]) != ckptEnd {
		return nil, fmt.Errorf("trailer: bad end marker %q (truncated file?)", tr[20:])
	}
	idxOff := binary.LittleEndian.Uint64(tr[0:])
	idxLen := binary.LittleEndian.Uint64(tr[8:])
	if idxOff < uint64(len(ckptMagic)) || idxOff > uint64(size-trailerSize) || idxLen != uint64(size-trailerSize)-idxOff {
		return nil, fmt.Errorf("trailer: index at %d+%d does not fit a file of %d bytes", idxOff, idxLen, size)
	}
	js := make([]byte, idxLen)
	if _, err := f.ReadAt(js, int64(idxOff)); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if got, want := crc32.Checksum(js, castagnoli), binary.LittleEndian.Uint32(tr[16:]); got != want {
		return nil, fmt.Errorf("index: checksum %08x, want %08x", got, want)
	}
	var idx checkpointIndex
	if err := json.Unmarshal(js, &idx); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if idx.Format != ckptFormat {
		return nil, fmt.Errorf("index: format %q, want %q", idx.Format, ckptFormat)
	}
	c := &Checkpoint{
		NextRound: idx.NextRound, Strategy: idx.Strategy, Seed: idx.Seed, Fraction: idx.Fraction,
		Sampler: idx.Sampler, History: idx.History, Clients: idx.Clients, StrategyState: tensor.Named{},
	}
	seen := map[int]bool{}
	for _, id := range idx.Clients {
		if seen[id] {
			return nil, fmt.Errorf("index: client %d listed twice", id)
		}
		seen[id] = true
	}
	end := int64(len(ckptMagic))
	for _, e := range idx.Tensors {
		if !validShape(e.Shape) {
			return nil, fmt.Errorf("tensor %q: bad shape %v", e.Name, e.Shape)
		}
		n := int64(tensor.Numel(e.Shape))
		if e.Offset != end || e.Offset+4*n > int64(idxOff) {
			return nil, fmt.Errorf("tensor %q: data at %d (%d bytes) out of place", e.Name, e.Offset, 4*n)
		}
		end += 4 * n
		buf := make([]byte, 4*n)
		if _, err := f.ReadAt(buf, e.Offset); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", e.Name, err)
		}
		if got := crc32.Checksum(buf, castagnoli); got != e.CRC {
			return nil, fmt.Errorf("tensor %q: checksum %08x, want %08x", e.Name, got, e.CRC)
		}
		t := &tensor.Tensor{Shape: append([]int{}, e.Shape...), Data: make([]float32, n)}
		for i := range t.Data {
			t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		name, ok := strings.CutPrefix(e.Name, "strategy/")
		if !ok {
			return nil, fmt.Errorf("tensor %q: unknown section", e.Name)
		}
		c.StrategyState[name] = t
	}
	if end != int64(idxOff) {
		return nil, fmt.Errorf("index: tensors end at %d but the index starts at %d", end, idxOff)
	}
	return c, nil
}

// validShape accepts non-negative dimensions whose product stays small
// enough to address.
func validShape(shape []int) bool {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return false
		}
		n *= int64(d)
		if n > 1<<40 {
			return false
		}
	}
	return true
}
