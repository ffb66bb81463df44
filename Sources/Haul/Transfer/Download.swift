import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

extension Download {
    /// What the server told us that lets a later request continue the same file (RFC 9110 §13.1.5).
    struct Validator: Sendable, Hashable {
        /// A strong ETag (weak ones are never kept).
        var etag: String?
        /// The `Last-Modified` date as the server wrote it.
        var lastModified: String?
        /// The file's complete length.
        var completeLength: Int64?

        /// The value for `If-Range`: the strong ETag, else `Last-Modified`; `nil` when neither can be trusted.
        var ifRangeValue: String? { self.etag ?? self.lastModified }

        init(etag: String? = nil, lastModified: String? = nil, completeLength: Int64? = nil) {
            self.etag = etag
            self.lastModified = lastModified
            self.completeLength = completeLength
        }

        /// The strong validators among a response's headers: an ETag that is not weak (`W/`), else a
        /// `Last-Modified` only when it is at least one second before the response's `Date` (RFC 9110 §8.8.2.2);
        /// a weak validator must never go in `If-Range`. With a strong ETag, `Last-Modified` is not kept: `If-Range`
        /// carries the ETag, and parsing two dates per response is a measurable share of a small file's CPU.
        init(_ headers: HTTPHeaders) {
            self.etag = headers.first(name: "etag").flatMap { $0.hasPrefix("W/") ? nil : $0 }
            if self.etag == nil, let lastModified = headers.first(name: "last-modified"),
                let modified = RetryAfter.httpDate(lastModified),
                let date = headers.first(name: "date").flatMap(RetryAfter.httpDate),
                date.timeIntervalSince(modified) >= 1
            {
                self.lastModified = lastModified
            }
        }
    }

    /// Everything one attempt needs, taken from the manager's record when the attempt starts.
    ///
    /// Uploads and deletions use it too, with the fields that concern them (URL, headers, progress, bandwidth, hooks).
    @dynamicMemberLookup
    struct Plan: Sendable {
        /// What no attempt changes, kept once in a ``Box``: a plan is copied from the manager to the attempt, its writer
        /// and its publication, and a reference is one retain where these fields inline were twenty.
        struct Fixed: Sendable {
            var id: TransferID
            var operation: TransferRequest.Operation
            var url: URL
            var headers: [(name: String, value: String)]
            /// The folder nothing may be written outside of.
            var folder: URL
            /// ``folder``'s path, without a trailing slash: the files' paths are built from it as text, not as URLs
            /// (each URL step and `path` conversion allocated, several times per file).
            var folderPath: String
            /// Whether a `Content-Disposition` name replaces the last component.
            var usesContentDisposition: Bool
            var conflictPolicy: ConflictPolicy
            var expectedByteCount: Int64?
            var checksum: Checksum?
            var computesSHA256: Bool
            var synchronizesFiles: Bool
            /// Whether a new small file may be made without a name and named once, when published (``PartialFile``;
            /// see ``TransferManager/Configuration/writesSmallFilesUnnamed``).
            var namesFilesWhenPublished = false
            /// Where the attempt stores its byte count for the manager to sample.
            var progress: ProgressCell
            var maximumFileSize: Int64?
            var lowSpeedLimit: TransferManager.LowSpeedLimit?
            /// How long a transfer may make no progress before the attempt fails.
            var idleTimeout: Duration
            /// The manager's bandwidth limit, shared by all its transfers, and this transfer's own, if it has one.
            var bandwidth: BandwidthLimiter
            var transferBandwidth: BandwidthLimiter?
            /// The caller's hooks, and which attempt this is (from 1), for them.
            var hooks: TransferManager.Hooks
            var attempt: Int
        }

        private final class Box: Sendable {
            let fixed: Fixed
            init(_ fixed: Fixed) { self.fixed = fixed }
        }

        private let box: Box
        /// The file's path below ``Fixed/folder``, as known before any response (a `Content-Disposition` name changes
        /// its last component for the attempt).
        var nameComponents: [String]
        /// Validators from an earlier attempt in this process, to resume its partial file (none once it restarts).
        var validator: Validator?

        init(_ fixed: Fixed, nameComponents: [String], validator: Validator?) {
            self.box = Box(fixed)
            self.nameComponents = nameComponents
            self.validator = validator
        }

        /// A field of ``Fixed`` (`plan.url`, `plan.hooks`, ...), read from the shared object.
        subscript<T>(dynamicMember field: KeyPath<Fixed, T>) -> T { self.box.fixed[keyPath: field] }

        /// The URL and headers for this attempt: the caller's request provider's, when there is one.
        nonisolated(nonsending) func preparedRequest() async -> (url: URL, headers: [(name: String, value: String)]) {
            guard let prepare = self.hooks.prepareRequest else { return (self.url, self.headers) }
            let prepared = await prepare(self.id, self.attempt, self.url, self.headers)
            return (prepared.url, prepared.headers)
        }

        /// Throws when the caller's status hook rejects a success status.
        func checkStatusHook(_ status: Int) throws {
            if let accepts = self.hooks.acceptsStatus, !accepts(self.id, status) {
                throw HaulError(.httpStatus, "The status hook rejected status \(status)", httpStatus: status)
            }
        }

        /// Takes `bytes` from the bandwidth limits now; returns how long they ask to wait before using them (the
        /// longer of the manager's and the transfer's own).
        func bandwidthDelay(for bytes: Int) -> Duration {
            max(self.bandwidth.delay(for: bytes), self.transferBandwidth?.delay(for: bytes) ?? .zero)
        }

        /// Waits as long as the bandwidth limits ask before `bytes` more may move.
        nonisolated(nonsending) func throttle(_ bytes: Int) async throws {
            let delay = self.bandwidthDelay(for: bytes)
            if delay > .zero { try await Task.sleep(for: delay) }
        }

        /// The final path for a name.
        func finalPath(_ components: [String]) -> String {
            Download.path(in: self.folderPath, components)
        }

        /// The partial file: beside the final file, named after it and the transfer, so that transfers that want
        /// the same final name never share a partial file.
        var partPath: String {
            Download.partPath(id: self.id, folderPath: self.folderPath, nameComponents: self.nameComponents)
        }
    }

    /// The partial file of a transfer: `NAME.TAG.part` beside the final file, where TAG comes from the identifier.
    static func partPath(id: TransferID, folderPath: String, nameComponents: [String]) -> String {
        let name = FileNaming.truncated(nameComponents.last!, maximumBytes: FileNaming.maximumNameBytes - 22)
        // The first 8 hex digits of the identifier's own derived identifier; the path is built in place (per attempt).
        let derived = id.derivedFromText.derivedValue!
        let tag = withUnsafeBytes(of: derived.bigEndian) { String(hexOf: $0.prefix(4)) }
        var path = self.path(in: folderPath, nameComponents.dropLast())
        path.reserveCapacity(path.utf8.count + name.utf8.count + 15)
        path += "/"
        path += name
        path += "."
        path += tag
        path += ".part"
        return path
    }

    /// A folder's path (as `URL.path` gives it) followed by file-name components (sanitised names, without
    /// slashes), joined with slashes: what appending each component to the folder's URL and taking its path gives.
    static func path(in folderPath: String, _ components: some Sequence<String>) -> String {
        var path = self.withoutTrailingSlashes(folderPath)
        if path == "/" { path = "" }
        for component in components {
            path += "/"
            path += component
        }
        return path
    }

    /// A folder URL's path as ``Plan/folderPath`` holds it.
    static func folderPath(of folder: URL) -> String {
        self.withoutTrailingSlashes(folder.path)
    }

    /// `path` without trailing slashes, but `/` for the root.
    private static func withoutTrailingSlashes(_ path: String) -> String {
        var path = path
        while path.utf8.count > 1, path.utf8.last == UInt8(ascii: "/") { path.removeLast() }
        return path
    }

    /// Hears what an attempt learns, to update the manager's record and emit events.
    protocol Observer: Sendable {
        func attemptStarted(_ id: TransferID, offset: Int64)
        func responseAccepted(_ id: TransferID, validator: Validator, expectedBytes: Int64?, receivedBytes: Int64)
        func restarted(_ id: TransferID, reason: String)
        /// The attempt no longer uses the network (its body has arrived and passed the checks; only publishing is
        /// left): its slots may go to the next transfers. Returns whether other transfers still hold slots (read in
        /// the same turn of the manager's lock, for
        /// ``willPublish(_:at:byteCount:sha256:modificationTime:lingering:then:)``).
        func leftNetwork(_ id: TransferID) -> Bool
        /// Whether ``willPublish(_:at:byteCount:sha256:modificationTime:lingering:then:)`` records finished files in
        /// a store before they are renamed: whether there is one.
        var recordsPublications: Bool { get }
        /// The finished file is about to be renamed to `path`: calls `recorded` once its completion is recorded
        /// (without a store, once the renames before it are done), not necessarily on this thread. Nothing waits
        /// meanwhile. With `lingering` (other transfers were still on the network when this one left it), the record
        /// may wait a moment for theirs to share its commit.
        func willPublish(
            _ id: TransferID,
            at path: String,
            byteCount: Int64,
            sha256: String?,
            modificationTime: Double?,
            lingering: Bool,
            then recorded: @escaping @Sendable () -> Void
        )
    }

    /// How an attempt's task ends: with the attempt's outcome, or with a file ready to publish, which goes on without
    /// the task (``publish(_:observer:isStopped:completion:)``).
    enum Ending: Sendable {
        case outcome(AttemptOutcome)
        case publication(Publication)
    }

    /// A file that arrived whole and passed its checks, to be recorded and moved to its final name: what an attempt
    /// hands over so that its task ends before the wait for the store's commit. A task keeps the stack its attempt
    /// grew (about 30 KB of async frames, held until the task ends), and a list of small files had over a thousand
    /// files waiting for a commit at once.
    struct Publication: Sendable {
        let plan: Plan
        /// The open file (or its `.part` name), owned by the publication from now on.
        let writer: BodyWriter
        let byteCount: Int64
        let sha256: String?
        /// The file's modification time, when read from the open file.
        let modified: Double?
    }

    /// Runs one attempt until it ends or has a file to publish; never throws.
    nonisolated(nonsending) static func run(
        _ plan: Plan,
        transport: HTTPTransport,
        observer: some Observer
    ) async -> Ending {
        do {
            return try await self.attempt(plan, transport: transport, observer: observer, mayRestart: true)
        } catch {
            return .outcome(self.failure(error, stopped: Task.isCancelled))
        }
    }

    /// The outcome of an attempt of any kind: what it returned, or its error as a failure, or `stopped` when its
    /// task was cancelled (a pause or a cancel).
    static func outcome(_ attempt: () async throws -> AttemptOutcome) async -> AttemptOutcome {
        do {
            return try await attempt()
        } catch {
            return self.failure(error, stopped: Task.isCancelled)
        }
    }

    /// An attempt's error as its outcome: `stopped` for a cancellation, or for any error once the attempt was asked
    /// to stop; else a failure.
    static func failure(_ error: any Error, stopped: Bool) -> AttemptOutcome {
        if error is CancellationError || stopped { return .stopped }
        return .failed(error as? HaulError ?? HaulError(.connectionFailed, "\(error)", underlying: error))
    }

    nonisolated(nonsending) private static func attempt(
        _ plan: Plan,
        transport: HTTPTransport,
        observer: some Observer,
        mayRestart: Bool
    ) async throws -> Ending {
        var plan = plan
        if !plan.usesContentDisposition, let outcome = self.existingFileOutcome(plan.nameComponents, plan) {
            return .outcome(outcome)
        }
        var headers = plan.headers
        headers.append(("Accept-Encoding", "identity"))
        // Built once (a hash and a path per call); again only when a Content-Disposition name replaces the URL's.
        var partPath = plan.partPath
        // Only a validator makes a partial file resumable (`If-Range`), so only then is its size looked up before
        // the request; without one, a partial file left there is found when it is opened, and started over. Most
        // downloads are new and have none: one lookup of the path fewer per file.
        let ifRange = plan.validator?.ifRangeValue
        var offset = ifRange == nil ? 0 : try PartialFile.size(of: partPath)
        var sentRange = false
        if offset > 0, let ifRange {
            headers.append(("Range", "bytes=\(offset)-"))
            headers.append(("If-Range", ifRange))
            sentRange = true
        }
        plan.progress.store(offset)
        observer.attemptStarted(plan.id, offset: offset)
        var requestURL = plan.url
        if let prepare = plan.hooks.prepareRequest {
            // The caller's URL and headers for this attempt (a re-signed URL, a fresh token), then Haul's own.
            let prepared = await prepare(plan.id, plan.attempt, plan.url, plan.headers)
            requestURL = prepared.url
            headers = prepared.headers + headers.dropFirst(plan.headers.count)
        }
        let response = try await transport.stream(requestURL, headers: headers)
        let status = Int(response.head.status.code)
        // Until its body has a writer, every way out gives the response up (its connection closes), before a restart
        // sends the next request.
        let accepted: HeadAcceptance
        do {
            accepted = try self.accept(
                response.head,
                plan: &plan,
                partPath: &partPath,
                offset: &offset,
                sentRange: sentRange,
                observer: observer
            )
        } catch let error as HaulError
            where error.code == .httpStatus && status >= 300 && Self.hasShortBody(response.head)
        {
            // The server's error page, of known, short length, is read (its first line goes into the message, as for
            // uploads and deletions), and the connection serves the next request instead of closing. Not a success
            // the status hook rejected: that is no error page, and the hook's message stands.
            let text = await response.text(upTo: 1024)
            throw HTTPTransport.statusError(response.head.status, response.head.headers, body: text)
        } catch {
            response.abandon()
            throw error
        }
        let (validator, expectedBytes, completeWithoutBody): (Validator, Int64?, Bool)
        switch accepted {
        case .restart(let reason):
            response.abandon()
            return try await self.restart(
                plan,
                transport: transport,
                observer: observer,
                mayRestart: mayRestart,
                reason: reason
            )
        case .outcome(let outcome):
            response.abandon()
            return .outcome(outcome)
        case .body(let accepted, let length, let noBody):
            (validator, expectedBytes, completeWithoutBody) = (accepted, length, noBody)
        }
        observer.responseAccepted(plan.id, validator: validator, expectedBytes: expectedBytes, receivedBytes: offset)
        let writer: BodyWriter
        do {
            writer = try self.makeWriter(
                plan,
                partPath: partPath,
                offset: offset,
                expectedBytes: expectedBytes,
                status: status,
                observer: observer
            )
        } catch {
            response.abandon()
            throw error
        }

        // Closed when the attempt ends here; a publication takes the open file with it.
        var handedOver = false
        defer { if !handedOver { writer.close() } }
        do {
            let ending = try await self.finish(
                plan,
                response: response,
                writer: writer,
                offset: offset,
                expectedBytes: expectedBytes,
                completeWithoutBody: completeWithoutBody,
                transport: transport,
                observer: observer,
                mayRestart: mayRestart
            )
            if case .publication = ending { handedOver = true }
            return ending
        } catch {
            // A file without a name keeps what arrived under its `.part` name, for the retry (or the cancel) to find.
            writer.keepUnpublished()
            throw error
        }
    }

    /// Receives the body into `writer`, checks the file, and publishes it.
    nonisolated(nonsending) private static func finish(
        _ plan: Plan,
        response: ResponseStream.Started,
        writer: BodyWriter,
        offset: Int64,
        expectedBytes: Int64?,
        completeWithoutBody: Bool,
        transport: HTTPTransport,
        observer: some Observer,
        mayRestart: Bool
    ) async throws -> Ending {
        let status = writer.status
        let partPath = writer.partPath
        if completeWithoutBody {
            response.discard()
        } else {
            do {
                try await response.receive(into: writer)
            } catch {
                try? writer.flush()
                throw HTTPTransport.haulError(for: error, url: plan.url, receivedBody: writer.receivedAny)
            }
            try writer.flush()
            // A cancelled attempt never publishes, whatever the body's end looked like.
            try Task.checkCancellation()
        }
        let byteCount = writer.size
        if let expected = expectedBytes, byteCount != expected {
            throw HaulError(
                .incompleteBody,
                "Received \(byteCount) of \(expected) bytes",
                httpStatus: status
            )
        }
        let checksumDigest = writer.checksumDigester?.finalize()
        var verificationError: HaulError?
        if let expected = plan.expectedByteCount, byteCount != expected {
            verificationError = HaulError(
                .sizeMismatch,
                "Expected \(expected) bytes but received \(byteCount)",
                httpStatus: status
            )
        } else if let checksum = plan.checksum, checksumDigest != checksum.hexDigest {
            verificationError = HaulError(
                .checksumMismatch,
                "The file's \(checksum.algorithm) is \(checksumDigest ?? "?"), expected \(checksum.hexDigest)",
                httpStatus: status
            )
        }
        if let verificationError {
            // A resumed file may splice two versions; one fresh download tells whether the source itself is wrong.
            guard offset > 0 else {
                writer.discard()
                throw verificationError
            }
            writer.close()
            return try await self.restart(
                plan,
                transport: transport,
                observer: observer,
                mayRestart: mayRestart,
                reason: "the resumed file failed verification (\(verificationError.message))",
                failure: verificationError
            )
        }
        if plan.synchronizesFiles { try writer.file!.synchronize() }
        // Read from the open file unless a validator hook may still touch it.
        let modified = plan.hooks.validatesFile == nil ? writer.file!.modificationTime() : nil
        // A file without a name stays open until it is named; a `.part` file is closed now.
        if !writer.isUnnamed { writer.close() }
        if let validates = plan.hooks.validatesFile, !validates(plan.id, URL(filePath: partPath)) {
            PartialFile.remove(partPath)
            throw HaulError(.validationFailed, "The file validator rejected the file", httpStatus: status)
        }
        let sha256 = plan.checksum?.algorithm == .sha256 ? checksumDigest : writer.sha256Digester?.finalize()
        return .publication(
            Publication(plan: plan, writer: writer, byteCount: byteCount, sha256: sha256, modified: modified)
        )
    }

    /// Whether a response announces a body short enough to read rather than close the connection: at most 64 KiB.
    static func hasShortBody(_ head: HTTPResponseHead) -> Bool {
        guard let length = head.headers.first(name: "content-length").flatMap({ Int($0) }) else { return false }
        return (0...65_536).contains(length)
    }

    /// What a response's head means for the attempt.
    private enum HeadAcceptance {
        /// Its body continues or replaces the partial file: the validators to record, the file's complete length
        /// when known, and whether the file is already complete (a 416 for a range at its end).
        case body(Validator, expectedBytes: Int64?, completeWithoutBody: Bool)
        /// The partial file cannot be continued: start over, for this reason.
        case restart(reason: String)
        /// The attempt ends without the body (a `Content-Disposition` name that exists and the policy keeps).
        case outcome(AttemptOutcome)
    }

    /// Checks a response's head against the attempt: its status (and the caller's status hook), a range's answer,
    /// the announced length against the limits, and a `Content-Disposition` name (which changes `plan`'s name and
    /// `partPath`). A whole file sent instead of a range removes the partial file and sets `offset` to zero.
    private static func accept(
        _ head: HTTPResponseHead,
        plan: inout Plan,
        partPath: inout String,
        offset: inout Int64,
        sentRange: Bool,
        observer: some Observer
    ) throws -> HeadAcceptance {
        let status = Int(head.status.code)
        if (200...299).contains(status) { try plan.checkStatusHook(status) }

        var validator = Validator(head.headers)
        var expectedBytes: Int64?
        var completeWithoutBody = false
        switch status {
        case 206 where sentRange:
            let contentRange = head.headers.first(name: "content-range").flatMap(ContentRange.init(parsing:))
            let known = plan.validator
            let sameValidator = known?.etag == nil || validator.etag == known?.etag
            guard let contentRange, contentRange.range?.lowerBound == offset, let length = contentRange.completeLength,
                known?.completeLength == nil || known?.completeLength == length, sameValidator
            else { return .restart(reason: "the server's Content-Range did not continue the partial file") }
            expectedBytes = length
        case 416 where sentRange:
            let contentRange = head.headers.first(name: "content-range").flatMap(ContentRange.init(parsing:))
            guard let contentRange, contentRange.range == nil, contentRange.completeLength == offset,
                plan.validator?.completeLength == nil || plan.validator?.completeLength == offset
            else { return .restart(reason: "the server refused the range of the partial file") }
            validator = plan.validator ?? validator
            expectedBytes = offset
            completeWithoutBody = true
        case 200...299 where status != 206:
            if offset > 0 {
                PartialFile.remove(partPath)
                offset = 0
                observer.restarted(plan.id, reason: "the server sent the whole file instead of the requested range")
            }
            if let header = head.headers.first(name: "content-length") {
                guard let length = Int64(header), length >= 0, header.allSatisfy(\.isASCII) else {
                    throw HaulError(
                        .invalidResponse,
                        "The server sent an invalid Content-Length: \"\(header)\"",
                        httpStatus: status
                    )
                }
                expectedBytes = length
            }
        default:
            throw HTTPTransport.statusError(head.status, head.headers, body: nil)
        }
        validator.completeLength = expectedBytes
        if let maximum = plan.maximumFileSize, let announced = expectedBytes, announced > maximum {
            throw HaulError(
                .fileTooLarge,
                "The file is \(announced) bytes, more than the maximum of \(maximum)",
                httpStatus: status
            )
        }
        if let expected = plan.expectedByteCount, let announced = expectedBytes, expected != announced {
            throw HaulError(
                .sizeMismatch,
                "Expected \(expected) bytes but the server announced \(announced)",
                httpStatus: status
            )
        }
        if plan.usesContentDisposition,
            let header = head.headers.first(name: "content-disposition"),
            let offered = ContentDisposition.fileName(in: header),
            let name = FileNaming.sanitizedName(ContentDisposition.lastComponent(of: offered))
        {
            plan.nameComponents[plan.nameComponents.count - 1] = name
            if let outcome = self.existingFileOutcome(plan.nameComponents, plan) { return .outcome(outcome) }
            partPath = plan.partPath
        }
        return .body(validator, expectedBytes: expectedBytes, completeWithoutBody: completeWithoutBody)
    }

    /// Opens the partial file at `offset` (emptying one left there without a validator) and makes the writer for the
    /// body, its digests fed with what the file holds already.
    private static func makeWriter(
        _ plan: Plan,
        partPath: String,
        offset: Int64,
        expectedBytes: Int64?,
        status: Int,
        observer: some Observer
    ) throws -> BodyWriter {
        let noValidator = "no validator from the server to resume the partial file safely"
        var file: PartialFile
        // A new file of known, small length is made without a name when nothing waits between its end and its
        // publishing (see ``PartialFile``), unless a validator hook must see it by its path or the policy replaces
        // files (a name, then a rename, as for a `.part` file).
        if plan.namesFilesWhenPublished, offset == 0, let length = expectedBytes, length <= PartialFile.unnamedLimit,
            plan.hooks.validatesFile == nil, plan.conflictPolicy != .overwrite,
            let unnamed = PartialFile(
                unnamedIn: Self.path(in: plan.folderPath, plan.nameComponents.dropLast()),
                partPath: partPath
            )
        {
            file = unnamed
            // A `.part` file left there without a validator cannot be resumed: removed, as opening it would empty it
            // (anything else there, a link say, is refused and left alone, as opening it would refuse it). Looked for
            // only where one may be (``PartFileNames``).
            if PartFileNames.shared.mayExist(at: partPath), try PartialFile.regularFileExists(at: partPath) {
                PartialFile.remove(partPath)
                observer.restarted(plan.id, reason: noValidator)
            }
        } else {
            file = try PartialFile(openingAt: partPath)
            if offset == 0, file.size > 0 {
                try file.startOver()
                observer.restarted(plan.id, reason: noValidator)
            }
        }
        guard file.size == offset else {
            throw HaulError(.fileSystem, "\(partPath) changed while it was being resumed")
        }
        if let length = expectedBytes {
            do throws(HaulError) {
                try file.reserve(toLength: length)
            } catch {
                // A new file that cannot fit leaves nothing behind; a resumed one keeps its bytes for a later try.
                if offset == 0 { file.discard() }
                throw error
            }
        }
        var checksumDigester = plan.checksum.map { Digester($0.algorithm) }
        var sha256Digester = plan.computesSHA256 && plan.checksum?.algorithm != .sha256 ? Digester(.sha256) : nil
        if file.size > 0, checksumDigester != nil || sha256Digester != nil {
            try PartialFile.read(partPath, upTo: file.size) { bytes in
                checksumDigester?.update(bytes)
                sha256Digester?.update(bytes)
            }
        }
        return BodyWriter(
            file: file,
            checksumDigester: checksumDigester,
            sha256Digester: sha256Digester,
            expectedBytes: expectedBytes,
            status: status,
            plan: plan
        )
    }

    /// Discards the partial file and tries once more from zero, or fails when that was the second try.
    private static func restart(
        _ plan: Plan,
        transport: HTTPTransport,
        observer: some Observer,
        mayRestart: Bool,
        reason: String,
        failure: HaulError? = nil
    ) async throws -> Ending {
        PartialFile.remove(plan.partPath)
        guard mayRestart else {
            throw failure ?? HaulError(.rangeNotHonored, "The server did not honour the range request: \(reason)")
        }
        observer.restarted(plan.id, reason: reason)
        var fresh = plan
        fresh.validator = nil
        return try await self.attempt(fresh, transport: transport, observer: observer, mayRestart: false)
    }

    /// The outcome when the final file exists and the policy keeps it; `nil` when downloading should go on.
    private static func existingFileOutcome(_ nameComponents: [String], _ plan: Plan) -> AttemptOutcome? {
        // Only skip and fail look before downloading (rename and overwrite decide when publishing): no path and no
        // system call per file for the others.
        guard plan.conflictPolicy == .skip || plan.conflictPolicy == .fail else { return nil }
        let path = plan.finalPath(nameComponents)
        guard PartialFile.exists(path) else { return nil }
        if plan.conflictPolicy == .skip { return .skipped(existing: URL(filePath: path)) }
        if plan.conflictPolicy == .fail {
            return .failed(HaulError(.fileExists, "\(path) exists (conflict policy: fail)"))
        }
        return nil
    }
}
