import NIOCore

/// Where a download's body goes: its partial file, the digests, and the checks made on every chunk (the announced
/// length, the maximum file size, the low-speed limit), with the attempt's progress stored as bytes arrive.
///
/// Made by the attempt's task once the response's head has passed its checks; from then on the connection's event
/// loop hands it each chunk as it arrives (``ResponseStream``), with no hand-off to the task per chunk; the task takes
/// it back when the response has ended.
final class BodyWriter: @unchecked Sendable {
    // @unchecked: one thread at a time uses it, and each hand-over is ordered by a future's completion (the task
    // until it attaches the writer, the event loop until the response ends, then the task). For the same reason its
    // variables go without the run-time check for overlapping accesses (none of its methods calls back into it).

    /// The partial file; `nil` once closed.
    @exclusivity(unchecked) var file: PartialFile?
    let partPath: String
    @exclusivity(unchecked) var checksumDigester: Digester?
    @exclusivity(unchecked) var sha256Digester: Digester?
    /// The complete length the response announced, if any.
    let expectedBytes: Int64?
    /// The response's status, for errors.
    let status: Int
    private let plan: Download.Plan
    @exclusivity(unchecked) private var speedWindow: (start: ContinuousClock.Instant, bytes: Int64)
    /// Whether any part of the body arrived.
    @exclusivity(unchecked) private(set) var receivedAny = false

    init(
        file: consuming PartialFile,
        checksumDigester: Digester?,
        sha256Digester: Digester?,
        expectedBytes: Int64?,
        status: Int,
        plan: Download.Plan
    ) {
        self.partPath = file.path
        self.speedWindow = (ContinuousClock.now, file.size)
        self.file = consume file
        self.checksumDigester = checksumDigester
        self.sha256Digester = sha256Digester
        self.expectedBytes = expectedBytes
        self.status = status
        self.plan = plan
    }

    /// The bytes in the file, written or pending.
    var size: Int64 { self.file?.size ?? 0 }

    /// Takes one chunk of the body: digests it, appends it to the file and checks the limits. Returns how long the
    /// bandwidth limits ask to wait before the next chunk; throws to end the transfer.
    func receive(_ chunk: ByteBuffer) throws(HaulError) -> Duration {
        self.receivedAny = true
        if self.checksumDigester != nil || self.sha256Digester != nil {
            chunk.withUnsafeReadableBytes { bytes in
                self.checksumDigester?.update(bytes)
                self.sha256Digester?.update(bytes)
            }
        }
        try self.file!.append(chunk)
        let size = self.file?.size ?? 0
        if let expected = self.expectedBytes, size > expected {
            throw HaulError(
                .sizeMismatch,
                "The server sent more than the \(expected) bytes it announced",
                httpStatus: self.status
            )
        }
        if let maximum = self.plan.maximumFileSize, size > maximum {
            self.discard()
            throw HaulError(
                .fileTooLarge,
                "The file grew past the maximum of \(maximum) bytes",
                httpStatus: self.status
            )
        }
        self.plan.progress.store(size)
        if let floor = self.plan.lowSpeedLimit, case let now = ContinuousClock.now,
            now - self.speedWindow.start >= floor.duration
        {
            let rate = Double(size - self.speedWindow.bytes) / (now - self.speedWindow.start).seconds
            if rate < Double(floor.bytesPerSecond) {
                throw HaulError(
                    .timedOut,
                    "Slower than \(floor.bytesPerSecond) bytes/s for \(floor.duration) (\(Int(rate)) bytes/s)"
                )
            }
            self.speedWindow = (now, size)
        }
        return self.plan.bandwidthDelay(for: chunk.readableBytes)
    }

    /// Writes what is pending to the file.
    func flush() throws(HaulError) {
        try self.file?.flush()
    }

    /// Whether the file is open without a name yet (it stays open until it is published or kept).
    var isUnnamed: Bool { self.file?.isUnnamed ?? false }

    /// Closes the file.
    func close() {
        self.file = nil
    }

    /// Closes the file and removes it.
    func discard() {
        if self.file == nil {
            PartialFile.remove(self.partPath)
        } else {
            self.file!.discard()
            self.file = nil
        }
    }

    /// Leaves what was received under the `.part` name, when the file has no name yet: an attempt ending before it
    /// publishes (an error, a cancel), so that a retry resumes from it. Best effort: what cannot be named is lost, as
    /// when the process is killed.
    func keepUnpublished() {
        guard self.isUnnamed else { return }
        if (try? self.file!.nameAtPartPath()) == nil { self.file = nil }
    }

    /// Moves the finished file to `target` without replacing anything: `false` when `target` exists.
    func publishWithoutReplacing(at target: String) throws(HaulError) -> Bool {
        guard self.file != nil else { return try PartialFile.publishWithoutReplacing(self.partPath, at: target) }
        return try self.file!.publishWithoutReplacing(at: target)
    }

    /// Moves the finished file to `target`, replacing what is there.
    func publishReplacing(at target: String) throws(HaulError) {
        guard self.file != nil else {
            try PartialFile.publishReplacing(self.partPath, at: target)
            return
        }
        try self.file!.publishReplacing(at: target)
    }
}
