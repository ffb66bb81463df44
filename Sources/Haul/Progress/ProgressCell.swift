import NIOConcurrencyHelpers

/// The byte count of one running attempt: the driver stores into it per chunk, and the manager samples it every
/// progress interval. Sampling instead of pushing keeps the manager's lock off the per-chunk path, and reports the
/// bytes that arrived just before a stall, which a push on the next chunk would hold back until the stall ended.
final class ProgressCell: Sendable {
    private let bytes: NIOLockedValueBox<Int64>

    init(_ bytes: Int64) { self.bytes = NIOLockedValueBox(bytes) }

    func store(_ value: Int64) { self.bytes.withLockedValue { $0 = value } }

    func load() -> Int64 { self.bytes.withLockedValue { $0 } }
}
