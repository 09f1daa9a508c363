package report

import (
	"bufio"
	"fmt"
	"io"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
)

// writeFileAtomic writes path by calling write on a temporary file in the
// same directory, syncing it and renaming it over path. On error path is
// left untouched and the temporary file is removed.
func writeFileAtomic(path string, write func(w io.Writer) error) error {
	err := atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
