package kineto

// Known keys map to small enums before their value is read, so the
// per-element switch and the error paths never hold key bytes across a
// read (the tokenizer's buffer and d.kbuf are both reused).
type field uint8

const (
	fOther field = iota
	fPh
	fName
	fCat
	fTS
	fDur
	fPID
	fTID
	fID
	fArgs
)

var fieldNames = [...]string{"?", "ph", "name", "cat", "ts", "dur", "pid", "tid", "id", "args"}

func (f field) String() string { return fieldNames[f] }

func fieldOf(k []byte) field {
	switch string(k) {
	case "ph":
		return fPh
	case "name":
		return fName
	case "cat":
		return fCat
	case "ts":
		return fTS
	case "dur":
		return fDur
	case "pid":
		return fPID
	case "tid":
		return fTID
	case "id":
		return fID
	case "args":
		return fArgs
	}
	return fOther
}

type argKey uint8

const (
	aNone argKey = iota
	aCorr
	aExt
	aSeq
	aDevice
	aStream
	aPGName
	aPGDesc
)

var argNames = [...]string{"?", "correlation", "External id", "Seq", "device", "stream", "Process Group Name", "Process Group Description"}

func (a argKey) String() string { return argNames[a] }

func argOf(k []byte) argKey {
	switch string(k) {
	case "correlation":
		return aCorr
	case "External id":
		return aExt
	case "Seq", "seq":
		return aSeq
	case "device":
		return aDevice
	case "stream":
		return aStream
	case "Process Group Name", "pg_name":
		return aPGName
	case "Process Group Description":
		return aPGDesc
	}
	return aNone
}
