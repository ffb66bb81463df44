import Foundation

extension TransferManager {
    /// One transfer as the manager knows it.
    struct Record: Sendable {
        var request: TransferRequest
        var host: String
        var folder: URL
        var nameComponents: [String]
        var usesContentDisposition: Bool
        var conflictPolicy: ConflictPolicy
        var machine = Download.StateMachine()
        /// The batches waiting for this transfer (more than one when a submission joined it).
        var batches: [BatchID] = []
        var validator: Download.Validator?
        var receivedBytes: Int64 = 0
        var expectedBytes: Int64?
        var rate = RateEstimator()
        var lastProgressEvent: ContinuousClock.Instant?
        /// The byte count of the last progress event, so the final one is not sent twice.
        var lastReportedBytes: Int64 = -1
        var stopSignal: StopSignal?
        /// Why the partial file was discarded, each time it was.
        var restarts: [String] = []
        /// The transfer's own bandwidth limit while an attempt runs (made when it starts, from the request's limit,
        /// so that a limit set during the attempt reaches it); `nil` otherwise: no object per queued transfer.
        var bandwidth: BandwidthLimiter?
        /// When progress was last written to the store, and how much.
        var lastCheckpoint: (at: ContinuousClock.Instant, bytes: Int64)?
        /// When the running attempt started, while the store has not heard of it (its running state and validator):
        /// they are written with its first checkpoint, half a second in, or when it ends unfinished. A small file
        /// completes before that, and costs the store no write between its insert and its completion.
        var unsavedStart: ContinuousClock.Instant?

        /// A download's partial file; `nil` for an upload or a deletion.
        var partPath: String? {
            guard self.request.isDownload else { return nil }
            return Download.partPath(
                id: self.request.id,
                folderPath: Download.folderPath(of: self.folder),
                nameComponents: self.nameComponents
            )
        }

        var state: TransferState {
            switch self.machine.state {
            case .waiting: .waiting
            case .running(intent: .pause): .paused
            case .running: .running
            case .backingOff: .waitingToRetry
            case .paused: .paused
            case .finished(let state): state
            }
        }

        var progress: TransferProgress {
            TransferProgress(
                receivedBytes: self.receivedBytes,
                expectedBytes: self.expectedBytes,
                bytesPerSecond: self.rate.bytesPerSecond
            )
        }
    }

    /// A finished transfer, kept small: what queries, batch reports and a later submission of its identifier need.
    /// A batch of 100,000 files keeps 100,000 of these, so the request, the rate, the limiter and the rest of a
    /// ``Record`` are dropped when a transfer finishes. Its fields live in one immutable object, so the dictionary's
    /// slots stay 8 bytes wide.
    struct FinishedRecord: Sendable {
        private final class Storage: Sendable {
            let urlText: String
            let destination: TransferRequest.Destination
            let isDownload: Bool
            let result: TransferResult
            let attempts: Int
            let restarts: [String]
            let receivedBytes: Int64
            let expectedBytes: Int64?

            init(
                urlText: String,
                destination: TransferRequest.Destination,
                isDownload: Bool,
                result: TransferResult,
                attempts: Int,
                restarts: [String],
                receivedBytes: Int64,
                expectedBytes: Int64?
            ) {
                self.urlText = urlText
                self.destination = destination
                self.isDownload = isDownload
                self.result = result
                self.attempts = attempts
                self.restarts = restarts
                self.receivedBytes = receivedBytes
                self.expectedBytes = expectedBytes
            }
        }

        private let storage: Storage

        private init(_ storage: Storage) { self.storage = storage }

        /// What `record` leaves once it has finished with `result`. Read where the record is (a function's argument is
        /// borrowed, an initializer's is its own): the record is not copied out of the table first.
        static func of(_ record: Record, result: TransferResult) -> FinishedRecord {
            FinishedRecord(
                Storage(
                    urlText: record.request.url.absoluteString,
                    destination: record.request.destination,
                    isDownload: record.request.isDownload,
                    result: result,
                    attempts: record.machine.attempts,
                    restarts: record.restarts,
                    receivedBytes: record.receivedBytes,
                    expectedBytes: record.expectedBytes ?? record.request.expectedByteCount
                )
            )
        }

        /// The URL as text: a parsed `URL` takes about 430 bytes, its text about 100.
        var urlText: String { self.storage.urlText }
        var destination: TransferRequest.Destination { self.storage.destination }
        var isDownload: Bool { self.storage.isDownload }
        var result: TransferResult { self.storage.result }
        var attempts: Int { self.storage.attempts }
        var restarts: [String] { self.storage.restarts }
        var receivedBytes: Int64 { self.storage.receivedBytes }
        var expectedBytes: Int64? { self.storage.expectedBytes }

        var state: TransferState { self.result.state }

        var progress: TransferProgress {
            TransferProgress(receivedBytes: self.receivedBytes, expectedBytes: self.expectedBytes, bytesPerSecond: 0)
        }
    }
}
