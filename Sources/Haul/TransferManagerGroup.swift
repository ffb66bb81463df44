import Foundation

/// Several managers seen as one (BNDownload's "multiple downloads"): one manager per kind of thing (photos, videos,
/// documents), each with its own limits, and one view of their activity and progress without glue code.
///
/// ```swift
/// let group = TransferManagerGroup([photos, videos])
/// spinner.isVisible = group.isActive
/// bar.progress = group.progress.fractionCompleted
/// await group.forEachEvent { manager, event in log(manager, event) }
/// ```
public struct TransferManagerGroup: Sendable {
    /// The managers, in the order given.
    public let managers: [TransferManager]

    /// A view of these managers.
    public init(_ managers: [TransferManager]) {
        self.managers = managers
    }

    /// Whether any manager has a transfer waiting or running.
    public var isActive: Bool { self.managers.contains { $0.isActive } }

    /// Requests in flight over all the managers.
    public var runningTransferCount: Int { self.managers.reduce(0) { $0 + $1.runningTransferCount } }

    /// The progress over every transfer the managers know, weighted by bytes (see
    /// ``TransferManager/overallProgress``).
    public var progress: BatchProgress {
        BatchProgress.combining(self.managers.map(\.overallProgress))
    }

    /// Calls `body` with every transfer event of every manager (and the manager's index in ``managers``), in order
    /// for each manager, until every manager's scope has ended.
    public func forEachEvent(_ body: @escaping @Sendable (Int, TransferEvent) async -> Void) async {
        let streams = self.managers.map { $0.events() }
        await withDiscardingTaskGroup { group in
            for (index, stream) in streams.enumerated() {
                group.addTask {
                    for await event in stream { await body(index, event) }
                }
            }
        }
    }
}

extension TransferManager {
    /// The progress over every transfer this manager knows (all its batches), weighted by bytes: what an app's
    /// global progress bar shows. New work lowers the fraction, unlike a batch's progress, which never goes back.
    public var overallProgress: BatchProgress {
        self.core.withLockedValue { core in
            var counts: [TransferState: Int] = [:]
            var transferred: Int64 = 0
            var known: Int64 = 0
            var knownDone: Int64 = 0
            var unknown = 0
            var speed = 0.0
            for record in core.finished.values {
                counts[record.state, default: 0] += 1
                transferred += record.receivedBytes
                if let expected = record.expectedBytes {
                    known += expected
                    knownDone += min(record.receivedBytes, expected)
                }
            }
            for record in core.transfers.values {
                counts[record.state, default: 0] += 1
                transferred += record.receivedBytes
                speed += record.state == .running ? record.rate.bytesPerSecond : 0
                if let expected = record.expectedBytes ?? record.request.expectedByteCount {
                    known += expected
                    knownDone += min(record.receivedBytes, expected)
                } else if !record.state.isFinished {
                    unknown += 1
                }
            }
            return BatchProgress(
                totalFiles: core.transfers.count + core.finished.count,
                completedFiles: counts[.completed, default: 0],
                failedFiles: counts[.failed, default: 0],
                cancelledFiles: counts[.cancelled, default: 0],
                skippedFiles: counts[.skipped, default: 0],
                transferredBytes: transferred,
                expectedBytes: unknown == 0 ? known : nil,
                knownExpectedBytes: known,
                filesOfUnknownSize: unknown,
                fractionCompleted: BatchProgress.fraction(
                    done: knownDone,
                    of: known,
                    finished: counts,
                    total: core.transfers.count + core.finished.count
                ),
                bytesPerSecond: speed,
                estimatedTimeRemaining: estimatedTime(remainingBytes: known - knownDone, bytesPerSecond: speed)
            )
        }
    }
}

extension BatchProgress {
    /// The byte-weighted fraction; by files when no size is known; 1 for nothing to do.
    static func fraction(done: Int64, of known: Int64, finished counts: [TransferState: Int], total: Int) -> Double {
        if known > 0 { return min(1, Double(done) / Double(known)) }
        guard total > 0 else { return 1 }
        let finished = counts.filter { $0.key.isFinished }.values.reduce(0, +)
        return Double(finished) / Double(total)
    }

    /// Progress values added together (several managers' overall progress).
    static func combining(_ parts: [BatchProgress]) -> BatchProgress {
        let known = parts.reduce(Int64(0)) { $0 + $1.knownExpectedBytes }
        let done = parts.reduce(0.0) { $0 + $1.fractionCompleted * Double($1.knownExpectedBytes) }
        let total = parts.reduce(0) { $0 + $1.totalFiles }
        let speed = parts.reduce(0.0) { $0 + $1.bytesPerSecond }
        let finished = parts.reduce(0) { $0 + $1.totalFiles - $1.remainingFiles }
        return BatchProgress(
            totalFiles: total,
            completedFiles: parts.reduce(0) { $0 + $1.completedFiles },
            failedFiles: parts.reduce(0) { $0 + $1.failedFiles },
            cancelledFiles: parts.reduce(0) { $0 + $1.cancelledFiles },
            skippedFiles: parts.reduce(0) { $0 + $1.skippedFiles },
            transferredBytes: parts.reduce(Int64(0)) { $0 + $1.transferredBytes },
            expectedBytes: parts.allSatisfy { $0.expectedBytes != nil } ? known : nil,
            knownExpectedBytes: known,
            filesOfUnknownSize: parts.reduce(0) { $0 + $1.filesOfUnknownSize },
            fractionCompleted: known > 0 ? done / Double(known) : (total > 0 ? Double(finished) / Double(total) : 1),
            bytesPerSecond: speed,
            estimatedTimeRemaining: estimatedTime(remainingBytes: known - Int64(done), bytesPerSecond: speed)
        )
    }
}
