import Foundation

extension TransferManager.Core {
    /// Records `operation` in the store, after those decided before it (``storeOperations``).
    mutating func record(_ operation: StoreOperation) {
        guard self.recordsToStore else { return }
        self.storeOperations.append(operation)
    }

    /// How often a running transfer's byte count is written to the store, at most. Half a second: a killed process
    /// under-reports at most that much, and the partial file, not this number, is the truth when resuming.
    static let checkpointInterval: Duration = .milliseconds(500)
    /// How often a running transfer's lease is renewed when its byte count does not change (a stall).
    static let leaseRenewalInterval: Duration = .seconds(10)

    /// The store operation for a transfer's event, if it has one.
    static func operation(for kind: TransferEvent.Kind, attempts: Int, id: TransferID) -> StoreOperation? {
        switch kind {
        case .queued: nil  // the row was just inserted as waiting (``StoreOperation/insert(_:)``)
        case .resumed: .state(id, .waiting, attempts: attempts)
        case .started: nil  // with the first checkpoint (``Record/unsavedStart``)
        case .paused: .state(id, .paused, attempts: attempts)
        case .retrying: .state(id, .waitingToRetry, attempts: attempts)
        case .progressed, .restarted: nil
        case .finished(.completed(let file)):
            // A download's completion was recorded before its rename (``StoreOperation/publishing``).
            file.isRecordedInStore ? nil : .completed(id, file, modified: file.modificationTime)
        case .finished(.failed(let error)): .failed(id, error, attempts: attempts)
        case .finished(.cancelled): .state(id, .cancelled, attempts: attempts)
        case .finished(.skipped): .state(id, .skipped, attempts: attempts)
        }
    }

    /// The operation that writes what the server said that lets a later attempt resume (and the file's size).
    static func validatorOperation(of record: TransferManager.Record, id: TransferID) -> StoreOperation {
        .validator(
            id,
            etag: record.validator?.etag,
            lastModified: record.validator?.lastModified,
            totalSize: record.expectedBytes
        )
    }

    /// The operation that inserts `record`'s row in `state` as item `position` of `batchID`, with the record's
    /// identifier as it is (not read again from the row's text).
    mutating func insert(
        _ record: TransferManager.Record,
        state: TransferState,
        as position: Int,
        of batchID: BatchID
    ) -> StoreOperation {
        let row = self.row(for: record, state: state)
        return .insert(InsertedRow(batchID: batchID, position: position, row: row, id: record.request.id))
    }

    /// The store's row for a record.
    mutating func row(for record: TransferManager.Record, state: TransferState) -> TransferRow {
        let secret = self.configuration.secretHeaderNames
        let headers = record.request.headers.filter { !secret.contains($0.name.lowercased()) }
        let kind = if case .file = record.request.destination { "file" } else { "folder" }
        let path = self.storedPaths.path(of: record.request.destination.url) { $0.standardizedFilePath }
        return TransferRow(
            id: record.request.id.rawValue,
            url: record.request.url.absoluteString,
            destinationKind: kind,
            destinationPath: path,
            folder: self.folderPaths.path(of: record.folder, Download.folderPath(of:)),
            nameComponents: JSONText.array(record.nameComponents),
            usesContentDisposition: record.usesContentDisposition,
            conflictPolicy: record.conflictPolicy.description,
            headers: JSONText.array(headers.map { JSONText.array([$0.name, $0.value]) }, elementsAreJSON: true),
            checksum: record.request.checksum?.description,
            expectedSize: record.request.expectedByteCount,
            computesSHA256: record.request.computesSHA256,
            state: state.description,
            bytesOnDisk: record.receivedBytes,
            totalSize: record.expectedBytes,
            etag: record.validator?.etag,
            lastModified: record.validator?.lastModified,
            attempts: 0,
            // The writer stamps the time it writes the row.
            updatedAt: 0,
            operation: record.request.isDownload
                ? StoredOperation.downloadJSON : Self.json(StoredOperation(record.request.operation))
        )
    }

    static func json<T: Encodable>(_ value: T) -> String {
        String(decoding: (try? JSONEncoder().encode(value)) ?? Data("[]".utf8), as: UTF8.self)
    }
}
