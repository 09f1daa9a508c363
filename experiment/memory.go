package experiment

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// availableMiB is the memory the system can give without swapping
// (/proc/meminfo MemAvailable), or 0 when unknown.
func availableMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb >> 10
		}
	}
	return 0
}

// cacheBudget is the RAM budget of the prefix caches in bytes: cache.memory_mib
// when set, else half of the available memory (4 GiB when unknown).
func cacheBudget(mib int) int64 {
	if mib > 0 {
		return int64(mib) << 20
	}
	if avail := availableMiB(); avail > 0 {
		return avail << 19 // half, in bytes
	}
	return 4096 << 20
}
