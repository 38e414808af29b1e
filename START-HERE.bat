@echo off
rem Windows entry point: finds Python 3.10 or newer (offers a per-user install, no administrator rights), makes
rem .venv in this folder, installs requirements.txt into it, then runs the installer with the same arguments.
setlocal EnableExtensions
cd /d "%~dp0"
set "VENV=%~dp0.venv"
set "PY="
set "ASSUME_YES=0"
for %%A in (%*) do (
  if /i "%%~A"=="--yes" set "ASSUME_YES=1"
  if /i "%%~A"=="-y" set "ASSUME_YES=1"
)

if exist "%VENV%\Scripts\python.exe" (
  "%VENV%\Scripts\python.exe" -c "import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)" >nul 2>&1
  if not errorlevel 1 set "PY=%VENV%\Scripts\python.exe"
)
if defined PY goto have_venv

call :find_python
if not defined SYS_PY (
  echo Python 3.10 or newer was not found.
  call :install_python
  call :find_python
)
if not defined SYS_PY (
  echo Python 3.10 or newer is still not available. Install it from python.org ^(choose "Install for me only"^),
  echo then double-click START-HERE.bat again.
  goto fail
)
echo Making the Python environment in %VENV% ...
if exist "%VENV%" rmdir /s /q "%VENV%"
"%SYS_PY%" -m venv "%VENV%"
if errorlevel 1 goto fail
set "PY=%VENV%\Scripts\python.exe"

:have_venv
"%PY%" -m installer.ensure_packages
if errorlevel 1 goto fail
"%PY%" -m installer %*
if errorlevel 1 goto fail
exit /b 0

:fail
echo.
echo Setup did not finish; the messages above say why.
pause
exit /b 1

rem Sets SYS_PY to a Python 3.10+ from the py launcher, PATH, or a per-user install not yet on PATH.
:find_python
set "SYS_PY="
for %%V in (3.13 3.12 3.11 3.10) do (
  if not defined SYS_PY (
    py -%%V -c "import sys" >nul 2>&1 && for /f "delims=" %%P in ('py -%%V -c "import sys; print(sys.executable)"') do set "SYS_PY=%%P"
  )
)
if not defined SYS_PY (
  python -c "import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)" >nul 2>&1 && for /f "delims=" %%P in ('python -c "import sys; print(sys.executable)"') do set "SYS_PY=%%P"
)
for %%V in (313 312 311 310) do (
  if not defined SYS_PY if exist "%LOCALAPPDATA%\Programs\Python\Python%%V\python.exe" set "SYS_PY=%LOCALAPPDATA%\Programs\Python\Python%%V\python.exe"
)
exit /b 0

rem Installs Python 3.12 for this user only (winget, no administrator rights), after asking.
:install_python
where winget >nul 2>&1
if errorlevel 1 (
  echo Install Python 3.12 from python.org: run the installer, choose "Install for me only", then run START-HERE.bat again.
  exit /b 1
)
set "ANSWER=y"
if not "%ASSUME_YES%"=="1" set /p "ANSWER=Install Python 3.12 for this user only (no administrator rights needed)? [Y/n] "
if /i not "%ANSWER:~0,1%"=="y" (
  echo Not installed.
  exit /b 1
)
winget install --exact --id Python.Python.3.12 --scope user --silent --accept-package-agreements --accept-source-agreements
exit /b %errorlevel%
