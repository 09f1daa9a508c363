package actcache

// spillGeometry returns how many records one spill segment holds and its
// size in bytes: at least one record, about chunk bytes, rounded up to a
// whole number of pages so that every segment can be mapped on its own.
func spillGeometry(recBytes int, chunk, page int64) (segRecs int, segBytes int64) {
	segRecs = max(1, int(chunk/int64(recBytes)))
	segBytes = (int64(segRecs)*int64(recBytes) + page - 1) / page * page
	return segRecs, segBytes
}
