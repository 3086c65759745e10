package cache

// SharedListHeader is on the answer of a LIST that waited in line with an
// identical one and was answered with that LIST's answer, read from the
// storage after both arrived, instead of a read and an encoding of its own
// (the value is "true"). It tells an operator, and the tests, that a burst
// of identical LISTs cost the server one encoding.
const SharedListHeader = "Kcp-Cache-Shared-List"
