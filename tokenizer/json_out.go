package tokenizer

import (
	"bufio"
	"fmt"
	"strconv"
)

// WriteJSON writes rows as `pfedmma tokenize` prints them, one line of
// {"tokens": [[...], ...]} with Python's json.dumps spacing, so the output
// matches a Python reference byte for byte.
func WriteJSON(w *bufio.Writer, rows [][]int) {
	w.WriteString(`{"tokens": [`)
	for i, row := range rows {
		if i > 0 {
			w.WriteString(", ")
		}
		w.WriteByte('[')
		for j, id := range row {
			if j > 0 {
				w.WriteString(", ")
			}
			w.WriteString(strconv.Itoa(id))
		}
		w.WriteByte(']')
	}
	fmt.Fprintln(w, "]}")
}
