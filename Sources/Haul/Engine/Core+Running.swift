import Foundation

/// Running: transfers started by the scheduler, their plans, and the ends of their attempts.
extension TransferManager.Core {
    /// Marks transfers the scheduler chose as running, each to run in a task of its own made once the lock is
    /// released (``Aftermath/starts``); tells the activity subscribers when the running count changed (every
    /// change of it passes through here).
    mutating func start(_ ids: [TransferID], aftermath: inout TransferManager.Aftermath) {
        defer {
            let running = self.scheduler.slotsInUse
            if running != self.reportedRunningCount {
                self.reportedRunningCount = running
                for subscriber in self.activitySubscribers.values { subscriber.yield(running) }
            }
        }
        for id in ids {
            let signal = StopSignal()
            let receivedBytes = self.withTransfer(id) { record in
                record.machine.started()
                record.stopSignal = signal
                record.bandwidth = BandwidthLimiter(bytesPerSecond: record.request.bandwidthLimit)
                return record.receivedBytes
            }
            self.progressCells[id] = ProgressCell(receivedBytes!)
            aftermath.starts.append((id, signal))
            self.transferTasks += 1
        }
    }

    /// A transfer's task has ended (its attempt and any wait for a retry are over).
    mutating func transferTaskEnded(aftermath: inout TransferManager.Aftermath) {
        self.transferTasks -= 1
        self.endWaitIfTransfersEnded(aftermath: &aftermath)
    }

    /// Ends the scope's wait once the manager has shut down and no transfer task is left.
    mutating func endWaitIfTransfersEnded(aftermath: inout TransferManager.Aftermath) {
        guard self.isShutDown, self.transferTasks == 0, let waiter = self.endedWaiter else { return }
        self.endedWaiter = nil
        aftermath.endedWaiter = waiter
    }

    /// A running transfer's body has arrived: its slots go to the next transfers while it publishes its file.
    /// Returns whether other transfers still hold slots once this one's went to the next: slots in use, not
    /// running transfers, which count those publishing (this one among them).
    mutating func leftNetwork(_ id: TransferID, aftermath: inout TransferManager.Aftermath) -> Bool {
        self.start(self.scheduler.leftNetwork(id), aftermath: &aftermath)
        return self.scheduler.slotsInUse > 0
    }

    /// The plan for the attempt of a transfer the scheduler started (nil if it is no longer running).
    mutating func plan(for id: TransferID) -> Download.Plan? {
        guard let folder = self.withTransfer(id, { $0.folder }) else { return nil }
        let folderPath = self.folderPaths.path(of: folder, Download.folderPath(of:))
        let (configuration, bandwidth, progressCell) = (self.configuration, self.bandwidth, self.progressCells[id])
        // Through the in-place accessor: the record's fields are read where they are, not copied out whole.
        return self.withTransfer(id) { record -> Download.Plan? in
            Self.plan(
                for: id,
                record: record,
                folderPath: folderPath,
                configuration: configuration,
                bandwidth: bandwidth,
                progressCell: progressCell
            )
        } ?? nil
    }

    static func plan(
        for id: TransferID,
        record: TransferManager.Record,
        folderPath: String,
        configuration: TransferManager.Configuration,
        bandwidth: BandwidthLimiter,
        progressCell: ProgressCell?
    ) -> Download.Plan? {
        guard record.stopSignal != nil else { return nil }
        var headers = record.request.headers
        if !headers.contains(where: { $0.name.lowercased() == "user-agent" }) {
            headers.append(("User-Agent", configuration.userAgent))
        }
        return Download.Plan(
            Download.Plan.Fixed(
                id: id,
                operation: record.request.operation,
                url: record.request.url,
                headers: headers,
                folder: record.folder,
                folderPath: folderPath,
                usesContentDisposition: record.usesContentDisposition,
                conflictPolicy: record.conflictPolicy,
                expectedByteCount: record.request.expectedByteCount,
                checksum: record.request.checksum,
                computesSHA256: record.request.computesSHA256,
                synchronizesFiles: configuration.synchronizesFiles,
                namesFilesWhenPublished: configuration.writesSmallFilesUnnamed ?? (configuration.store == nil),
                progress: progressCell ?? ProgressCell(record.receivedBytes),
                maximumFileSize: configuration.maximumFileSize,
                lowSpeedLimit: configuration.lowSpeedLimit,
                idleTimeout: configuration.idleTimeout,
                bandwidth: bandwidth,
                transferBandwidth: record.bandwidth,
                hooks: configuration.hooks,
                attempt: record.machine.attempts
            ),
            nameComponents: record.nameComponents,
            validator: record.validator
        )
    }

    /// A running attempt ended; returns the wait the driver must do before ``retryWaitEnded(_:_:aftermath:)``
    /// when the transfer will be retried.
    mutating func attemptEnded(
        _ id: TransferID,
        outcome: Download.AttemptOutcome,
        jitter: Double,
        aftermath: inout TransferManager.Aftermath
    ) -> TransferManager.RetryWait? {
        let now = self.now
        let machineOutcome: Download.StateMachine.Outcome? =
            switch outcome {
            case .completed: .completed
            case .failed: .failed
            case .skipped: .skipped
            case .stopped: nil
            }
        var retryDelay: Duration?
        if case .failed(let error) = outcome {
            retryDelay = self.configuration.retryPolicy.delay(
                afterAttempt: self.withTransfer(id) { $0.machine.attempts }!,
                failingWith: error,
                retryAfter: error.retryAfter,
                random: jitter
            )
        }
        if let cell = self.progressCells.removeValue(forKey: id) {
            let checkpoint: Checkpoint = if case .completed = outcome { .never } else { .now }
            self.progressed(id, receivedBytes: cell.load(), at: now, checkpoint: checkpoint)
        }
        let (action, host, attempts) = self.withTransfer(id) { record in
            let action = record.machine.attemptEnded(machineOutcome, retryDelay: retryDelay)
            record.stopSignal = nil
            record.bandwidth = nil
            return (action, record.host, record.machine.attempts)
        }!
        if case .scheduleRetry(let delay) = action, case .failed(let error) = outcome {
            let signal = StopSignal()
            self.withTransfer(id) { $0.stopSignal = signal }
            // Retry-After speaks for the whole host: hold it before the freed slot goes to another transfer.
            if error.retryAfter != nil { self.scheduler.hold(host) }
            self.emit(id, .retrying(attempt: attempts, delay: delay, error: error))
            self.start(self.scheduler.runningEnded(id), aftermath: &aftermath)
            return TransferManager.RetryWait(
                delay: delay,
                signal: signal,
                heldHost: error.retryAfter != nil ? host : nil
            )
        }
        let nextStarts = self.scheduler.runningEnded(id)
        let result: TransferResult =
            switch outcome {
            case .completed(let file): .completed(file)
            case .failed(let error): .failed(error)
            case .skipped(let existing): .skipped(existing: existing)
            case .stopped: .cancelled
            }
        self.apply(action, to: id, result: result, at: now, aftermath: &aftermath)
        self.start(nextStarts, aftermath: &aftermath)
        return nil
    }

    /// The wait before a retry ended (its delay passed, or a pause or cancel cut it short).
    mutating func retryWaitEnded(
        _ id: TransferID,
        _ wait: TransferManager.RetryWait,
        aftermath: inout TransferManager.Aftermath
    ) {
        if let host = wait.heldHost { self.start(self.scheduler.release(host), aftermath: &aftermath) }
        guard self.transfers[id] != nil else { return }
        let action = self.transfers[id]!.machine.retryDue()
        self.apply(action, to: id, result: nil, at: self.now, aftermath: &aftermath)
    }
}
