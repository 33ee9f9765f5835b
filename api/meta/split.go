package meta

// Split cuts items into consecutive parts whose sizes, as size measures
// them, add up to at most max each; an item larger than max gets a part of
// its own. Order is kept. There is always at least one part: an empty
// items gives one nil part.
//
// Parts are sub-slices of items, not copies, capped at their length so
// that appending to one part never overwrites the next.
func Split[T any](items []T, size func(T) int, max int) [][]T {
	if len(items) == 0 {
		return [][]T{nil}
	}
	var parts [][]T
	start, sum := 0, 0
	for i, item := range items {
		n := size(item)
		if sum > 0 && sum+n > max {
			parts = append(parts, items[start:i:i])
			start, sum = i, 0
		}
		sum += n
	}
	return append(parts, items[start:len(items):len(items)])
}
